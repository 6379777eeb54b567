"""Named-entity recognition engines: spaCy pipelines and transformers token classifiers."""
