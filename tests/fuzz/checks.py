"""Pass conditions of the edge fuzz cases against the launched server (``tests/fuzz/launched_server.py``).

The conditions of :mod:`tests.fuzz.calls` (no INTERNAL/UNKNOWN, an answer in time), plus what a
separate process lets a test see: the process is still running after the case, and the stall
probe says how long its event loop was held (:data:`MAX_STALL_S`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import grpc
import jsonschema

from tests.fuzz.calls import BAD_CODES
from tests.fuzz.launched_server import LaunchedServer

#: Longest time one case may hold the server's event loop: the probe's longest health check to
#: the server less the longest to an idle control process in the same window (what a busy machine
#: made any process wait). 0.5 s is far above a quiet run's and leaves room for a loaded machine,
#: and still fails any request that parses or converts megabytes on the loop (see
#: docs/architecture/design-notes.md#the-stall-probes-bound).
MAX_STALL_S = 0.5
#: Text that must never reach a client: Python exception names and tracebacks.
LEAKS = ("Traceback", "DecodeError", "Error parsing message", "<class '", 'File "', "Exception calling")


@contextmanager
def launched_case(
    server: LaunchedServer, what: Callable[[], str], max_stall_s: float = MAX_STALL_S
) -> Iterator[None]:
    """One case on the launched server: (re)started before it, alive and not stalled after it.

    ``what`` names the case for failure messages (called only on failure).

    Raises:
        AssertionError: the process died during the case (how, with its log's tail), or the probe
            saw its event loop held longer than ``max_stall_s``.

    """
    server.ensure()
    with server.probe.window() as stall:
        try:
            yield
        except Exception as err:  # a dropped connection is a crash when the process is gone
            time.sleep(0.5)
            if (ended := server.crash()) is not None:
                raise AssertionError(f"the server died ({ended}) on {what()}\n{server.log_tail()}") from err
            raise AssertionError(f"{type(err).__name__}: {err} on {what()}") from err
    time.sleep(0.02)  # a crash during the answer's last bytes: let the process end before looking
    ended = server.crash()
    assert ended is None, f"the server died ({ended}) on {what()}\n{server.log_tail()}"
    assert stall.stall_s <= max_stall_s, (
        f"the event loop was held {stall.max_s:.2f} s (the idle control waited {stall.control_max_s:.2f} s;"
        f" bound {max_stall_s} s beyond it) by {what()}"
    )


def assert_grpc_answer(code: grpc.StatusCode, details: str, what: Callable[[], str]) -> None:
    """A gRPC answer is a clear one: not INTERNAL/UNKNOWN, and no exception text in its details."""
    assert code not in BAD_CODES, f"{code.name} ({details}) for {what()}"
    assert not any(leak in details for leak in LEAKS), (
        f"exception text in {code.name} details {details!r}: {what()}"
    )


def assert_http_answer(status: int, body: str, what: Callable[[], str]) -> None:
    """An HTTP answer is no 5xx, and an error body carries no exception text."""
    assert status < 500, f"HTTP {status} ({body[:300]}) for {what()}"
    if status >= 400:
        assert not any(leak in body for leak in LEAKS), (
            f"exception text in HTTP {status}: {body[:300]}: {what()}"
        )


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    keys = [key for key, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ValueError(f"duplicate keys in {keys}")
    return dict(pairs)


def strict_json(text: str) -> Any:
    """``text`` parsed as RFC 8259 JSON, strictly: no raw control characters in strings (json's
    ``strict``), no NaN/Infinity, no duplicate keys, nothing after the value.

    Raises:
        ValueError: it is not strict JSON (``json.JSONDecodeError`` is one).

    """
    return json.loads(
        text, strict=True, parse_constant=_reject_constant, object_pairs_hook=_reject_duplicates
    )


def assert_valid_output(text: str, schema: dict | None, what: Callable[[], str]) -> None:
    """Output written under a JSON grammar parses strictly and validates against ``schema`` (when given)."""
    try:
        value = strict_json(text)
    except ValueError as err:
        raise AssertionError(f"output is not strict JSON ({err}): {text[:300]!r} for {what()}") from None
    if schema is not None:
        errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(value), key=str)
        assert not errors, f"output {text[:300]!r} breaks the schema: {errors[0].message[:300]} for {what()}"
