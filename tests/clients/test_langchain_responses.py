"""LangChain's ``ChatOpenAI(use_responses_api=True)`` → the gateway's Responses API → SmolLM2.

LangChain then calls ``responses.create`` (and ``responses.stream`` when streaming) instead of
Chat Completions: messages become input items, tool calls ``function_call`` items, and the
answer's output items come back as an ``AIMessage`` with content blocks. Tracing is off.
"""

from __future__ import annotations

from tests.clients.conftest import require
from tests.conftest import CHAT_MODEL

require("langchain_openai")

from langchain_core.messages import AIMessageChunk, HumanMessage, ToolMessage  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402

from tests.clients.langchain_tools import get_weather  # noqa: E402


def chat(url: str, **kwargs) -> ChatOpenAI:
    return ChatOpenAI(
        model=CHAT_MODEL,
        base_url=f"{url}/v1",
        api_key="unused",
        temperature=0,
        max_retries=0,
        use_responses_api=True,
        **kwargs,
    )


async def test_invoke(gateway_url):
    answer = await chat(gateway_url, max_tokens=24).ainvoke("What is the capital of France?")
    assert answer.text.strip()
    assert answer.response_metadata["id"].startswith("resp_")
    assert answer.response_metadata["status"] in ("completed", "incomplete")
    usage = answer.usage_metadata
    assert usage["input_tokens"] > 0 and 0 < usage["output_tokens"] <= 24
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]


async def test_stream(gateway_url):
    chunks = [chunk async for chunk in chat(gateway_url, max_tokens=24).astream("Count from one to five.")]
    assert all(isinstance(chunk, AIMessageChunk) for chunk in chunks)
    texts = [chunk.text for chunk in chunks if chunk.text]
    assert len(texts) >= 3, "tokens must stream as separate chunks"
    merged = chunks[0]
    for chunk in chunks[1:]:
        merged += chunk
    assert merged.text == "".join(texts)
    assert merged.usage_metadata["output_tokens"] > 0


async def test_tool_call_round_trip(gateway_url):
    model = chat(gateway_url, max_tokens=64)
    forced = model.bind_tools([get_weather], tool_choice="get_weather")
    question = HumanMessage("What is the weather in Paris?")
    first = await forced.ainvoke([question])
    [call] = first.tool_calls
    assert call["name"] == "get_weather" and isinstance(call["args"]["city"], str)
    result = ToolMessage(get_weather.invoke(call["args"]), tool_call_id=call["id"])
    answer = await model.bind_tools([get_weather], tool_choice="none").ainvoke([question, first, result])
    assert answer.tool_calls == []
    assert answer.text.strip()
