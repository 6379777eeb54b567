"""Reranking engines: cross-encoders (bi-encoder cosine reranking lives in the embedding engine)."""
