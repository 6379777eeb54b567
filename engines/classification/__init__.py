"""Text classification: transformers classifiers, scikit-learn heads over embeddings, custom heads."""
