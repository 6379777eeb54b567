"""``litellm.responses`` (LiteLLM's Responses API, ``openai/`` provider) → gateway → SmolLM2.

Offline as in test_litellm.py: the bundled model cost map, telemetry off. LiteLLM fakes a stream
(one non-streamed call, its text cut into deltas) for a model its cost map does not know, so the
model is registered with ``supports_native_streaming``, as a user serving their own model would.
LiteLLM wraps response ids (``resp_`` + base64 of the provider and our id) and unwraps them in
``previous_response_id``.
"""

from __future__ import annotations

import os

from tests.clients.conftest import require
from tests.conftest import CHAT_MODEL

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
require("litellm")

import litellm  # noqa: E402

litellm.telemetry = False
litellm.register_model(
    {
        f"openai/{CHAT_MODEL}": {
            "litellm_provider": "openai",
            "mode": "responses",
            "supports_native_streaming": True,
        }
    }
)


def options(gateway_url: str) -> dict:
    return {"model": f"openai/{CHAT_MODEL}", "api_base": f"{gateway_url}/v1", "api_key": "unused"}


async def test_responses(gateway_url):
    response = await litellm.aresponses(
        input="What is the capital of France?", max_output_tokens=24, temperature=0, **options(gateway_url)
    )
    assert response.id.startswith("resp_")
    assert response.status in ("completed", "incomplete")
    [message] = response.output
    assert message.type == "message" and message.content[0].text.strip()
    assert response.usage.input_tokens > 0 and 0 < response.usage.output_tokens <= 24


async def test_streamed_responses(gateway_url):
    stream = await litellm.aresponses(
        input="Count from one to five.",
        max_output_tokens=128,
        temperature=0,
        stream=True,
        **options(gateway_url),
    )
    events = [event async for event in stream]
    kinds = [event.type for event in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    deltas = [event.delta for event in events if event.type == "response.output_text.delta"]
    assert len(deltas) >= 3, "tokens must stream as separate events"
    final = events[-1].response
    assert "".join(deltas) == final.output[0].content[0].text


async def test_chain_over_previous_response_id(gateway_url):
    first = await litellm.aresponses(
        input="My name is Ada.", max_output_tokens=8, temperature=0, **options(gateway_url)
    )
    second = await litellm.aresponses(
        input="What is my name?",
        previous_response_id=first.id,
        max_output_tokens=8,
        temperature=0,
        **options(gateway_url),
    )
    alone = await litellm.aresponses(
        input="What is my name?", max_output_tokens=1, store=False, **options(gateway_url)
    )
    # The first turn (question and answer) was sent before the new input.
    assert second.usage.input_tokens > alone.usage.input_tokens + 5
