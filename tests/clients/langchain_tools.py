"""What the LangChain client tests share: tracing switched off, and a tool for the model to call.

Import it after ``require("langchain_openai")`` (which brings ``langchain_core``).
"""

from __future__ import annotations

import os

from langchain_core.tools import tool

# LangChain sends nothing anywhere else unless tracing is on: keep it off, explicitly.
os.environ["LANGSMITH_TRACING"] = "false"
os.environ["LANGCHAIN_TRACING_V2"] = "false"


@tool
def get_weather(city: str) -> str:
    """Get the current weather for a city."""
    return f"Sunny in {city}"
