"""GGUF text generation with llama-cpp-python.

The chat template comes from the GGUF metadata (``tokenizer.chat_template``) and is rendered
with llama-cpp-python's sandboxed Jinja2 formatter, as Hugging Face's ``apply_chat_template``
would. Every call into the ``Llama`` object happens on the device executor's single thread.
"""

from __future__ import annotations

import logging
import os
import random
from typing import Any

from engines.errors import InvalidArgumentError, ModelLoadError
from engines.generation.base import GenerationEngine
from engines.generation.sequence import GenerationSequence
from engines.registry import register_backend
from engines.sources import path_size_bytes, resolve_source
from engines.types import ChatMessage, GenerationRequest, MemoryUsage, SamplingParams

log = logging.getLogger(__name__)

DEFAULT_MAX_CONTEXT = 4096


class LlamaCppSequence(GenerationSequence):
    """A sequence driven by ``Llama.generate`` (one sequence per ``Llama`` at a time)."""

    def __init__(
        self, llm: Any, request_id: str, prompt_tokens: list[int], params: SamplingParams, room: int
    ):
        super().__init__(request_id, prompt_tokens, params, min(room, params.max_tokens or room))
        import llama_cpp

        self._llm = llm
        self._vocab = llm._model.vocab
        self._is_eog = llama_cpp.llama_vocab_is_eog
        llm.set_seed(params.seed if params.seed is not None else random.randrange(2**31))
        # Evaluate the whole prompt every time: llama-cpp-python's prefix reuse re-decodes
        # only the tail of a cached prompt, which changes the logits enough to change greedy
        # output, so the same request would not give the same text twice.
        llm.reset()
        self._tokens = llm.generate(
            prompt_tokens,
            temp=params.temperature,
            top_k=params.top_k,
            top_p=params.top_p,
            min_p=params.min_p,
            repeat_penalty=params.repetition_penalty,
            presence_penalty=params.presence_penalty,
            frequency_penalty=params.frequency_penalty,
            reset=True,
        )

    def next_token(self) -> int:
        """Resume ``Llama.generate`` for one token."""
        return int(next(self._tokens))

    def is_end_of_generation(self, token_id: int) -> bool:
        """EOS and the other end-of-generation tokens of the vocabulary (e.g. ``<|im_end|>``)."""
        return bool(self._is_eog(self._vocab, token_id))

    def token_bytes(self, token_id: int) -> bytes:
        """Bytes of one token's piece."""
        return self._llm.detokenize([token_id])

    def close(self) -> None:
        """Finish the underlying generator so the context is free for the next sequence."""
        self._tokens.close()


@register_backend
class LlamaCppGenerationEngine(GenerationEngine):
    """Generation from a GGUF file with llama-cpp-python.

    Catalog options: ``n_ctx`` (context tokens; default the model's training context capped
    at 4096), ``n_threads`` (default: all cores), ``n_gpu_layers`` (default: all on CUDA builds
    when the device is CUDA, else 0), ``chat_template`` (override the GGUF's template).
    """

    backend = "llama_cpp"

    @classmethod
    def select_device(cls, preferred: str) -> str:
        """CUDA only when llama.cpp was built with GPU offload; otherwise CPU."""
        import llama_cpp

        if preferred.startswith("cuda") and llama_cpp.llama_supports_gpu_offload():
            return preferred
        return "cpu"

    def _model_path(self) -> str:
        resolved = resolve_source(self.spec.source)
        if resolved.path is None:
            raise ModelLoadError(
                f"llama_cpp needs a local .gguf file; {self.spec.source!r} is not one", model=self.spec.name
            )
        return str(resolved.path)

    def estimated_load_bytes(self) -> int:
        """The GGUF file size (weights are memory-mapped and mostly resident once used)."""
        resolved = resolve_source(self.spec.source)
        return path_size_bytes(resolved.path) if resolved.path else 0

    def load(self) -> None:
        """Open the GGUF file and build the chat formatter from its metadata."""
        import llama_cpp
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        path = self._model_path()
        n_gpu_layers = self.option("n_gpu_layers", -1 if self.device.startswith("cuda") else 0)
        self.llm = llama_cpp.Llama(
            model_path=path,
            n_ctx=int(self.option("n_ctx", 0)) or self._default_context(path),
            n_threads=int(self.option("n_threads", os.cpu_count() or 1)),
            n_gpu_layers=int(n_gpu_layers),
            verbose=False,
        )
        metadata = self.llm.metadata
        template = self.option("chat_template") or metadata.get("tokenizer.chat_template")
        self._bos_text = self._token_text(self.llm.token_bos())
        self._eos_text = self._token_text(self.llm.token_eos())
        self._formatter = (
            Jinja2ChatFormatter(template=template, eos_token=self._eos_text, bos_token=self._bos_text)
            if template
            else None
        )

    @staticmethod
    def _default_context(path: str) -> int:
        import llama_cpp

        probe = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
        try:
            return min(probe._model.n_ctx_train(), DEFAULT_MAX_CONTEXT)
        finally:
            probe.close()

    def _token_text(self, token_id: int) -> str:
        if token_id < 0:
            return ""
        return self.llm.detokenize([token_id], special=True).decode("utf-8", errors="replace")

    def unload(self) -> None:
        """Free the llama.cpp model and context."""
        llm = getattr(self, "llm", None)
        if llm is not None:
            llm.close()
        self.llm = None
        self._formatter = None

    def memory_usage(self) -> MemoryUsage:
        """Weights plus the KV cache (f16 keys and values for every layer and context position)."""
        if getattr(self, "llm", None) is None:
            return MemoryUsage()
        meta = self.llm.metadata
        arch = meta.get("general.architecture", "llama")
        layers = int(meta.get(f"{arch}.block_count", 0))
        embed = int(meta.get(f"{arch}.embedding_length", 0))
        heads = int(meta.get(f"{arch}.attention.head_count", 1)) or 1
        kv_heads = int(meta.get(f"{arch}.attention.head_count_kv", heads))
        kv_bytes = 2 * layers * int(self.llm.n_ctx()) * (embed * kv_heads // heads) * 2
        total = int(self.llm._model.size()) + kv_bytes
        if self.device.startswith("cuda"):
            return MemoryUsage(ram_bytes=0, vram_bytes=total)
        return MemoryUsage(ram_bytes=total)

    @property
    def context_length(self) -> int:
        """The context size the model was opened with.

        llama.cpp may pad its context (to 256 cells) beyond the size asked for, while
        llama-cpp-python sizes its token buffer to the size asked for; the smaller one binds.
        """
        return min(int(self.llm.n_ctx()), int(self.llm.context_params.n_ctx))

    def render_chat(self, messages: list[ChatMessage]) -> str:
        """Render a conversation with the model's chat template, ending with the assistant prompt.

        Raises:
            InvalidArgumentError: the model has no chat template, or the template rejects the messages.

        """
        if self._formatter is None:
            raise InvalidArgumentError(
                f"model {self.spec.name!r} has no chat template; send a raw prompt instead",
                reason="NO_CHAT_TEMPLATE",
                model=self.spec.name,
            )
        payload = [_message_dict(m) for m in messages]
        try:
            return self._formatter(messages=payload).prompt
        except Exception as exc:  # template errors (raise_exception in the template) are client errors
            raise InvalidArgumentError(
                f"the chat template of model {self.spec.name!r} rejected the messages: {exc}",
                reason="CHAT_TEMPLATE_ERROR",
            ) from None

    def tokenize_prompt(self, request: GenerationRequest) -> list[int]:
        """Token ids of the request's prompt (templated when it is a chat)."""
        if request.messages is not None:
            text = self.render_chat(request.messages)
            add_bos = not (self._bos_text and text.startswith(self._bos_text))
        else:
            text, add_bos = request.prompt or "", True
        return self.llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=True)

    def open_sequence(self, request: GenerationRequest) -> LlamaCppSequence:
        """Tokenize, check the length and start ``Llama.generate`` for ``request``."""
        tokens = self.tokenize_prompt(request)
        room = self.check_prompt_length(len(tokens))
        return LlamaCppSequence(self.llm, request.request_id, tokens, request.params, room)


def _message_dict(message: ChatMessage) -> dict[str, Any]:
    """OpenAI-style message dict, the shape chat templates expect."""
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.name:
        out["name"] = message.name
    if message.tool_call_id:
        out["tool_call_id"] = message.tool_call_id
    if message.tool_calls:
        out["tool_calls"] = message.tool_calls
    return out
