"""What both faces share: settings, TLS files, API keys and the tracer provider.

A leaf package: the gRPC server (``service``) and the REST gateway (``gateway``) import it, and it
imports neither of them, nor ``engines``, torch, FastAPI or starlette (an import contract in
``pyproject.toml`` says so). So the server never imports the REST package to reach what both need,
and the gateway reaches nothing else of the server.
"""
