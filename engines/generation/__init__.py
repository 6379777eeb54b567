"""Text-generation engines and the pieces they share (stop matching, incremental decoding)."""
