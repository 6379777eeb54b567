"""Sentence-embedding engines."""
