"""Pydantic models of the OpenAI-shaped HTTP request bodies the gateway accepts."""
