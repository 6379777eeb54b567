"""Inference engines: one module per backend and task, speaking plain dataclasses (no gRPC)."""
