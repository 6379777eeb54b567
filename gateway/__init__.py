"""OpenAI-compatible REST gateway in front of the Universal Runtime gRPC server.

The gateway holds no model code: every route translates an OpenAI-shaped HTTP request into a
``universal_runtime.v1`` gRPC call and the answer back. Build an app with
:func:`gateway.app.create_app`; run one from the command line with ``universal-runtime-gateway``.
"""

from gateway.app import create_app

__all__ = ["create_app"]
