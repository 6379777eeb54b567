"""A real server whose quotas run on a test clock, behind the gateway: the quota tests' fixture body.

Shared by ``test_quota_headers`` (429s) and ``test_ratelimit_headers`` (every answer's headers).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from gateway.app import create_app
from service import server as server_module
from service.quotas import Quotas
from service.server import start_server
from tests.conftest import MAX_MESSAGE_BYTES
from tests.gateway.gateway_fakes import asgi_client
from tests.service.core.test_quotas import Clock


@contextlib.asynccontextmanager
async def quota_gateway(
    settings, keys_text: str, folder: Path, mode: str
) -> AsyncIterator[tuple[httpx.AsyncClient, Clock, int]]:
    """Start the server with ``keys_text`` as its keys file and a gateway in front of it.

    Args:
        settings: The tests' server settings (the ``settings`` fixture).
        keys_text: The keys file's YAML.
        folder: Where the keys file is written.
        mode: ``"grpc"`` (the gateway calls over a channel) or ``"in-process"`` (the combined
            process's in-process unary calls).

    Yields:
        The gateway's HTTP client, the quotas' clock (move ``clock.now``) and the gRPC port.

    """
    path = folder / "keys.yaml"
    path.write_text(keys_text)
    clock = Clock()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(server_module, "Quotas", lambda keys: Quotas(keys, clock=clock))
        running = await start_server(settings.model_copy(update={"api_keys_file": path}))
    wrap = running.in_process.channel if mode == "in-process" else None
    app = create_app(
        f"127.0.0.1:{running.port}",
        max_message_bytes=MAX_MESSAGE_BYTES,
        api_keys_file=path,
        wrap_channel=wrap,
    )
    try:
        async with asgi_client(app) as http:
            yield http, clock, running.port
    finally:
        await running.stop(grace=0.5)
