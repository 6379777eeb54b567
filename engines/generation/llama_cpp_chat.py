"""The chat template of a GGUF model, rendered as Hugging Face's ``apply_chat_template`` would.

The template is the catalog's ``chat_template`` or the GGUF metadata's ``tokenizer.chat_template``;
llama-cpp-python's sandboxed Jinja2 formatter renders it with the model's BOS and EOS texts.
"""

from __future__ import annotations

from typing import Any


class LlamaCppChatTemplate:
    """One chat template with the BOS and EOS texts its ``bos_token``/``eos_token`` variables hold."""

    def __init__(self, template: str, *, bos_text: str, eos_text: str) -> None:
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        self._formatter = Jinja2ChatFormatter(template=template, eos_token=eos_text, bos_token=bos_text)

    def render(
        self,
        messages: list[dict[str, Any]],
        tools: list | None,
        add_generation_prompt: bool = True,
        **template_kwargs: Any,
    ) -> str:
        """The prompt text of ``messages`` (see :meth:`GenerationEngine._render_chat`).

        Raises:
            Exception: whatever the template raises (reported as CHAT_TEMPLATE_ERROR by the caller).

        """
        # The formatter reads the flag from itself; this runs on the lane only, one call at a time.
        self._formatter.add_generation_prompt = add_generation_prompt
        try:
            return self._formatter(messages=messages, tools=tools, **template_kwargs).prompt
        finally:
            self._formatter.add_generation_prompt = True
