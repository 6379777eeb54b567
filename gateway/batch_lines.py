"""One line of a batch (``POST /v1/batches``), run through the gateway's own route, in-process.

The server's batch runner knows a line's ``url``, its JSON ``body`` and the NAME of the key that
submitted the batch. :class:`BatchLineExecutor` turns that into the HTTP call a client would have
made, and hands it to a gateway app through ``httpx.ASGITransport``: no socket, but the same
validation, translation, errors and answer shapes as a live call, because it IS the live route.
The call carries:

- ``Authorization: Bearer <the key's secret>`` (:meth:`service.shared.api_keys.ApiKeys.secret`),
  so the line runs under the submitting key: its name in the log, its quotas;
- ``X-UR-Priority: batch`` (:data:`gateway.dependencies.PRIORITY_HEADER`), forwarded to the server
  as gRPC metadata,
  which lowers the call's class below interactive work in every queue;
- ``x-request-id``: the line's own id when the runner gives one.

Bounds: each line has ``timeout_s`` in all (a line past it answers 504, and its gRPC call is
cancelled with it); a line refused as over the key's quota or a full queue (429 with
``Retry-After``) waits that long and is sent again, at most :data:`MAX_ATTEMPTS` times, all within
the same ``timeout_s``. A line that asks to stream (``"stream": true``) is refused (400), as
OpenAI's Batch API refuses it: a batch's output is one JSON body per line.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import time
from collections.abc import Collection
from typing import Any

import httpx
from fastapi import FastAPI

from gateway.dependencies import PRIORITY_HEADER
from gateway.errors import error_body, error_type_for_status
from gateway.middleware import REQUEST_ID_HEADER
from gateway.settings import GatewayConfig

logger = logging.getLogger(__name__)

BATCH_PRIORITY = "batch"

DEFAULT_LINE_TIMEOUT_S = 600.0
"""Seconds one line may take in all, retries included: far above one chat answer of a few thousand
tokens on CPU or a many-page OCR, so only a stuck line reaches it."""

MAX_ATTEMPTS = 20
"""Most times one line is sent (the first and its retries after 429 with ``Retry-After``)."""

MAX_RETRY_WAIT_S = 60.0
"""Longest single wait before a retry, whatever ``Retry-After`` says (it is whole seconds; a
quota's reset may be a minute away)."""

_BASE_URL = "http://batch.internal"


class BatchLineExecutor:
    """Runs batch lines through a gateway app in this process (see the module docstring).

    Use as an async context manager (it runs the app's lifespan, which opens the app's gRPC channel)
    or call :meth:`start` and :meth:`close`; :meth:`execute` is the runner's executor.

    Args:
        app: A gateway app (:func:`gateway.app.create_app`) built with the server's keys and limits.
            Its lifespan must not be running elsewhere: the executor runs it.
        urls: The routes a line may name (the server's list of batch endpoints): every other url
            is refused, so that a line cannot reach the routes that manage state (classifiers,
            files, batches themselves: a batch must not create batches).
        timeout_s: Seconds one line may take in all, retries included; must be positive.

    Raises:
        ValueError: ``timeout_s`` is not positive.

    """

    def __init__(
        self, app: FastAPI, *, urls: Collection[str], timeout_s: float = DEFAULT_LINE_TIMEOUT_S
    ) -> None:
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        self._app = app
        self._urls = frozenset(urls)
        self._timeout_s = timeout_s
        self._stack: contextlib.AsyncExitStack | None = None
        self._client: httpx.AsyncClient | None = None

    async def start(self) -> None:
        """Run the app's lifespan (its gRPC channel opens) and make the in-process HTTP client."""
        stack = contextlib.AsyncExitStack()
        await stack.enter_async_context(self._app.router.lifespan_context(self._app))
        self._client = await stack.enter_async_context(
            httpx.AsyncClient(transport=httpx.ASGITransport(app=self._app), base_url=_BASE_URL, timeout=None)
        )
        self._stack = stack

    async def close(self) -> None:
        """Close the client and end the app's lifespan (its channel closes)."""
        stack, self._stack, self._client = self._stack, None, None
        if stack is not None:
            await stack.aclose()

    async def __aenter__(self) -> BatchLineExecutor:
        """Start (see :meth:`start`)."""
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        """Close (see :meth:`close`)."""
        await self.close()

    async def execute(
        self, url: str, body: dict[str, Any], key_name: str, *, request_id: str | None = None
    ) -> tuple[int, dict[str, Any]]:
        """Run one batch line: ``POST url`` with ``body`` under the key named ``key_name``.

        Args:
            url: The line's route, one of ``urls`` (e.g. ``/v1/embeddings``).
            body: The line's JSON body, as the route takes it.
            key_name: The name of the key that submitted the batch; ``""`` when the server has no
                keys (authentication off).
            request_id: Sent as ``x-request-id`` (the server's log names the line by it), when given.

        Returns:
            ``(http_status, json_body)``: the route's answer as a client would have read it (an
            OpenAI error body for any failure), which OpenAI's batch output records as the line's
            ``response.status_code`` and ``response.body``. Refusals of the executor itself: 400
            ``invalid_url`` (a route not in ``urls``), 400 ``streaming_unsupported``, 401
            ``invalid_api_key`` (the key is gone from the keys file), 504 ``timeout`` (past
            ``timeout_s``), 503 ``unavailable`` (the executor is not started).

        """
        if url not in self._urls:
            return _refusal(400, f"url {url!r} cannot run in a batch", "invalid_url", param="url")
        if body.get("stream") is True:
            return _refusal(400, "stream: a batch line cannot stream", "streaming_unsupported", "body.stream")
        client = self._client
        if client is None:
            return _refusal(503, "the batch line executor is not running", "unavailable")
        headers = {PRIORITY_HEADER: BATCH_PRIORITY}
        if request_id is not None:
            headers[REQUEST_ID_HEADER] = request_id
        config: GatewayConfig = self._app.state.config
        if config.api_keys:
            secret = config.api_keys.secret(key_name)
            if secret is None:
                message = f"the key {key_name!r} that submitted this batch is no longer configured"
                return _refusal(401, message, "invalid_api_key")
            headers["authorization"] = f"Bearer {secret}"
        content = json.dumps(body).encode()
        try:
            async with asyncio.timeout(self._timeout_s):
                return await self._send(client, url, content, headers)
        except TimeoutError:
            return _refusal(504, f"the line did not finish within {self._timeout_s:g} s", "timeout")

    async def _send(
        self, client: httpx.AsyncClient, url: str, content: bytes, headers: dict[str, str]
    ) -> tuple[int, dict[str, Any]]:
        """POST until an answer other than a retryable 429 (:data:`MAX_ATTEMPTS` at most)."""
        headers = {**headers, "content-type": "application/json"}
        deadline = time.monotonic() + self._timeout_s
        for attempt in range(1, MAX_ATTEMPTS + 1):
            response = await client.post(url, content=content, headers=headers)
            wait = _retry_wait(response)
            if wait is None or attempt == MAX_ATTEMPTS or time.monotonic() + wait > deadline:
                return response.status_code, _json_body(response)
            logger.debug("batch line %s: 429, retrying in %.1f s (attempt %d)", url, wait, attempt)
            await asyncio.sleep(wait)
        raise AssertionError("unreachable: the last attempt returns")


def _retry_wait(response: httpx.Response) -> float | None:
    """Seconds to wait before sending again: a 429 with ``Retry-After`` (capped), else ``None``."""
    if response.status_code != 429:
        return None
    value = response.headers.get("retry-after", "")
    try:
        seconds = float(value)
    except ValueError:
        return None
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return min(seconds, MAX_RETRY_WAIT_S)


def _json_body(response: httpx.Response) -> dict[str, Any]:
    """The answer's JSON object; a body that is not one (no route answers so) becomes an error body."""
    try:
        parsed = response.json()
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        return parsed
    message = f"the route answered {response.status_code} without a JSON object"
    return error_body(message, error_type="server_error", code="bad_answer")


def _refusal(status: int, message: str, code: str, param: str | None = None) -> tuple[int, dict[str, Any]]:
    return status, error_body(message, error_type=error_type_for_status(status), code=code, param=param)
