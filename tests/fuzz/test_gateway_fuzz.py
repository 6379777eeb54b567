"""Fuzz the REST gateway from its own OpenAPI document, in front of the real gRPC server.

Schemathesis generates requests for every operation of ``/openapi.json`` and calls the ASGI app in
process, :data:`~tests.fuzz.strategies.EXAMPLES` cases per operation and mode: valid ones
(positive) and ones that break the schema (negative). A case passes when the answer is not a 5xx
(``not_a_server_error``), arrives within :data:`MAX_RESPONSE_S`, and, for a negative case, is a
4xx (``negative_data_rejection``: input the document calls invalid is refused, not served). The
operations are read from the document, so a new route is fuzzed as soon as it is registered;
:data:`REQUIRED_OPERATIONS` fails the test if one that must be there (the public APIs') is not. Schemathesis drives the
app from its own event-loop thread, while the gRPC server runs on pytest's loop, so the
synchronous Hypothesis run goes to a worker thread and pytest's loop stays free to serve.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
import schemathesis
from hypothesis import given
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import negative_data_rejection, not_a_server_error

from gateway.app import create_app
from tests.conftest import MAX_MESSAGE_BYTES
from tests.fuzz.strategies import FUZZ_SETTINGS

# Generation is capped by the schema-valid max_tokens the fuzzer picks; a chat call on the tiny
# model answers in a few seconds at most, so 20 s only trips on a hang.
MAX_RESPONSE_S = 20.0
STATS: Counter[str] = Counter()
#: Operations the document must hold (the generation APIs clients use: OpenAI Chat, Completions
#: and Responses, Anthropic Messages), so none drops out of the fuzz unnoticed.
REQUIRED_OPERATIONS = {
    "POST /v1/chat/completions",
    "POST /v1/completions",
    "POST /v1/responses",
    "GET /v1/responses/{response_id}",
    "DELETE /v1/responses/{response_id}",
    "GET /v1/responses/{response_id}/input_items",
    "POST /v1/messages",
    "POST /v1/messages/count_tokens",
}


@pytest.fixture(scope="module")
def schema(server):
    app = create_app(f"127.0.0.1:{server.port}", max_message_bytes=MAX_MESSAGE_BYTES)
    return schemathesis.openapi.from_asgi("/openapi.json", app)


def operations(schema) -> list:
    """Every operation of the gateway's OpenAPI document."""
    return [result.ok() for result in schema.get_all_operations()]


def test_the_document_holds_the_required_operations(schema):
    labels = {operation.label for operation in operations(schema)}
    assert labels >= REQUIRED_OPERATIONS, sorted(REQUIRED_OPERATIONS - labels)


async def test_gateway_answers_generated_requests_without_server_errors(schema):
    failures: list[str] = []

    def fuzz_operation(operation, mode: GenerationMode) -> None:
        checks = [not_a_server_error, *([negative_data_rejection] if mode.is_negative else [])]

        @FUZZ_SETTINGS
        @given(case=operation.as_strategy(mode))
        def run(case):
            response = case.call()
            STATS[f"{operation.label}:{mode.value}:{response.status_code}"] += 1
            case.validate_response(response, checks=checks)
            assert response.elapsed <= MAX_RESPONSE_S, f"{operation.label} took {response.elapsed:.1f} s"

        run()

    for operation in operations(schema):
        for mode in GenerationMode:
            try:
                await asyncio.to_thread(fuzz_operation, operation, mode)
            except Unsatisfiable as err:
                if mode.is_negative:
                    # No input of this operation breaks its schema (no body, no parameters, or
                    # only free strings such as a name in the path): no negative case to send.
                    STATS[f"{operation.label}:{mode.value}:none"] += 1
                else:
                    failures.append(f"{operation.label} ({mode.value} data): {err}")
            except Exception as err:  # collect every operation's failure, not only the first
                failures.append(f"{operation.label} ({mode.value} data): {err}")
    print("\ngateway fuzz cases by operation and status:", dict(sorted(STATS.items())))
    assert not failures, "\n".join(failures)
