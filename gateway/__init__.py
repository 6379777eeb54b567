"""OpenAI-compatible REST gateway in front of the Universal Runtime gRPC server.

The gateway holds no model code: every route translates an OpenAI-shaped HTTP request into a
``universal_runtime.v1`` gRPC call and the answer back. Build an app with
:func:`gateway.app.create_app`; run one from the command line with ``universal-runtime-gateway``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    # Lazy (PEP 562): importing a submodule that needs no FastAPI (gateway.settings, gateway.https)
    # does not pay for importing it.
    if name == "create_app":
        from gateway.app import create_app

        return create_app
    raise AttributeError(f"module 'gateway' has no attribute {name!r}")
