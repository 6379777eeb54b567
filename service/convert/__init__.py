"""Protobuf ↔ engine dataclass conversion, with request validation."""
