"""Conversions between the OpenAI JSON shapes and the ``universal_runtime.v1`` protobuf messages."""
