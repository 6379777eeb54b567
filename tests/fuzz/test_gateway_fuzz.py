"""Fuzz the REST gateway from its own OpenAPI document, in front of the real gRPC server.

Schemathesis generates requests for every operation of ``/openapi.json`` (valid ones and ones
that break the schema) and calls the ASGI app in process. A case passes when the answer is not a
5xx (``not_a_server_error``) and arrives within :data:`MAX_RESPONSE_S`. Schemathesis drives the
app from its own event-loop thread, while the gRPC server runs on pytest's loop, so the
synchronous Hypothesis run goes to a worker thread and pytest's loop stays free to serve.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
import schemathesis
from hypothesis import given
from schemathesis.checks import not_a_server_error

from gateway.app import create_app
from tests.conftest import MAX_MESSAGE_BYTES
from tests.fuzz.strategies import FUZZ_SETTINGS

# Generation is capped by the schema-valid max_tokens the fuzzer picks; a chat call on the tiny
# model answers in a few seconds at most, so 20 s only trips on a hang.
MAX_RESPONSE_S = 20.0
STATS: Counter[str] = Counter()


@pytest.fixture(scope="module")
def schema(server):
    app = create_app(f"127.0.0.1:{server.port}", max_message_bytes=MAX_MESSAGE_BYTES)
    return schemathesis.openapi.from_asgi("/openapi.json", app)


def operations(schema) -> list:
    """Every operation of the gateway's OpenAPI document."""
    return [result.ok() for result in schema.get_all_operations()]


async def test_gateway_answers_generated_requests_without_server_errors(schema):
    failures: list[str] = []

    def fuzz_operation(operation) -> None:
        @FUZZ_SETTINGS
        @given(case=operation.as_strategy())
        def run(case):
            response = case.call()
            STATS[f"{operation.label}:{response.status_code}"] += 1
            case.validate_response(response, checks=[not_a_server_error])
            assert response.elapsed <= MAX_RESPONSE_S, f"{operation.label} took {response.elapsed:.1f} s"

        run()

    for operation in operations(schema):
        try:
            await asyncio.to_thread(fuzz_operation, operation)
        except Exception as err:  # collect every operation's failure, not only the first
            failures.append(f"{operation.label}: {err}")
    print("\ngateway fuzz cases by operation and status:", dict(sorted(STATS.items())))
    assert not failures, "\n".join(failures)
