"""The OpenAI Agents SDK (``openai-agents``) → gateway's Responses API → the real server.

An agent with one function tool runs to a final answer: the first turn is forced to call the tool
(``tool_choice`` names it; the SDK resets it to ``auto`` after a call), the SDK runs the tool and
sends its output back as a ``function_call_output`` item (the whole conversation as input items,
no ``previous_response_id``), and the model answers. The answer is typed (``output_type``, sent as
``text.format`` json_schema), so a 135M model's answer is short and checkable: left free, it
rambles past any ``max_tokens``, and the SDK refuses an ``incomplete`` response. Tracing is off
(it would post to OpenAI).
"""

from __future__ import annotations

import openai

from tests.clients.conftest import require
from tests.conftest import CHAT_MODEL

require("agents")

from agents import (  # noqa: E402
    Agent,
    ModelSettings,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from agents.items import MessageOutputItem, ToolCallItem, ToolCallOutputItem  # noqa: E402
from pydantic import BaseModel  # noqa: E402

set_tracing_disabled(True)


class WeatherReport(BaseModel):
    """The agent's final answer: structured, so a 135M model's answer is short and checkable."""

    city: str
    sunny: bool


async def test_agent_with_a_function_tool_reaches_a_final_answer(gateway_url):
    cities: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        cities.append(city)
        return f"It is sunny and 22 C in {city}."

    async with openai.AsyncOpenAI(base_url=f"{gateway_url}/v1", api_key="unused", max_retries=0) as client:
        agent = Agent(
            name="weather",
            instructions="Use the get_weather tool, then answer.",
            tools=[get_weather],
            output_type=WeatherReport,
            model=OpenAIResponsesModel(model=CHAT_MODEL, openai_client=client),
            model_settings=ModelSettings(tool_choice="get_weather", temperature=0, max_tokens=256),
        )
        result = await Runner.run(agent, "What is the weather in Paris?", max_turns=4)

    kinds = [type(item) for item in result.new_items]
    assert kinds[:2] == [ToolCallItem, ToolCallOutputItem], kinds
    assert kinds[-1] is MessageOutputItem
    assert len(cities) == 1 and isinstance(cities[0], str)
    assert isinstance(result.final_output, WeatherReport)
    assert len(result.raw_responses) >= 2
    assert all(response.usage.input_tokens > 0 for response in result.raw_responses)
