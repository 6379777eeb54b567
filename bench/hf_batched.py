"""transformers' own batched ``generate``, no server: the ceiling of our transformers engine.

B prompts, left-padded into one batch, go through one ``model.generate`` call (greedy,
``max_new_tokens`` new tokens); transformers then runs one forward per step over the whole
batch, as our engine's scheduler does, but without a server, a scheduler or per-token work of
ours. The model is loaded by our engine itself (:class:`TransformersGenerationEngine`, from the
catalog entry: the same converted safetensors copy, dtype and device, and the same torch thread
count as a server lane), and the prompts are the token ids the engine would feed for the same
messages.

Timing comes from a streamer: ``generate`` hands the prompt to it once, then each step's new
tokens (shape ``[B]``) as soon as they are chosen, so the time of the first step's hand-off is
every sequence's time to first token (the whole batch's prefill included), measured in the same
call as the rest.

Used by :mod:`bench.inprocess` (the ``transformers-batched`` worker, the generation bench's
ceiling for the transformers rows).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from bench.batched_decode import Wave

#: The transformers generation model of the default catalog (the bench's default).
DEFAULT_MODEL = "smollm2-135m-instruct-hf"


class StepClock:
    """A ``generate`` streamer that only notes when each step's tokens arrive.

    Attributes:
        steps: ``time.perf_counter()`` at each step's hand-off after the prompt's, in order.

    """

    def __init__(self) -> None:
        self.steps: list[float] = []
        self._prompt_seen = False

    def put(self, value: Any) -> None:
        """Called by ``generate``: first with the prompt ids, then with each step's new tokens."""
        now = time.perf_counter()
        if self._prompt_seen:
            self.steps.append(now)
        self._prompt_seen = True

    def end(self) -> None:
        """Called by ``generate`` when it is done (nothing to flush)."""


class HFBatchedGenerator:
    """Our transformers engine's model and tokenizer, driven by ``model.generate`` in batches.

    Args:
        model_name: A catalog entry of backend ``transformers`` (``UR_CATALOG_PATH``, else the
            embedded default catalog).

    Raises:
        ValueError: the entry is not a transformers model.
        KeyError: the catalog has no such entry.

    """

    def __init__(self, model_name: str = DEFAULT_MODEL):
        from engines.executor import DeviceExecutor
        from engines.generation.transformers_engine import TransformersGenerationEngine
        from service.catalog import load_catalog

        catalog = os.environ.get("UR_CATALOG_PATH")
        spec = load_catalog(Path(catalog) if catalog else None).specs[model_name]
        if spec.backend != TransformersGenerationEngine.backend:
            raise ValueError(f"{model_name} has backend {spec.backend}, not transformers")
        device = TransformersGenerationEngine.select_device(spec.device)
        # The executor is never used: the engine is driven on this thread, only its load is ours.
        self._executor = DeviceExecutor(device, "bench")
        self.engine = TransformersGenerationEngine(spec, device, self._executor)
        # As a server lane does before load: its torch threads (and nice value) on this thread.
        self.engine.configure_lane()
        self.engine.load()
        self.device = device
        self.tokenizer = self.engine.tokenizer
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:  # padding is masked out; any id will do
            self.tokenizer.pad_token = self.tokenizer.eos_token

    def close(self) -> None:
        """Unload the model."""
        self.engine.unload()
        self._executor.shutdown()

    def chat_tokens(self, messages: list[dict[str, str]]) -> list[int]:
        """The prompt token ids our engine feeds for ``messages`` (its chat template and tokenizer)."""
        from engines.types import ChatMessage, GenerationRequest

        turns = [ChatMessage(m["role"], m["content"]) for m in messages]
        return self.engine.tokenize_prompt(GenerationRequest("bench", messages=turns))

    def generate(self, prompts: list[list[int]], max_tokens: int) -> Wave:
        """Greedy-generate ``prompts`` as one left-padded batch, up to ``max_tokens`` new tokens each.

        A sequence's tokens end at its first end-of-generation token (kept, as the llama.cpp
        ceiling keeps it); ``generate`` pads the steps after that. Times are seconds from the
        ``generate`` call: ``ttft_s`` its first step (the same for every sequence of the batch),
        ``latency_s`` the step of each sequence's last token, ``prefill_s`` + ``decode_s`` the
        whole call (padding the prompts into tensors comes before it).
        """
        import torch

        batch = self.tokenizer.pad({"input_ids": prompts}, padding=True, return_tensors="pt")
        input_ids = batch["input_ids"].to(self.device)
        attention_mask = batch["attention_mask"].to(self.device)
        clock = StepClock()
        start = time.perf_counter()
        with torch.inference_mode():
            output = self.engine.model.generate(
                input_ids=input_ids,
                attention_mask=attention_mask,
                max_new_tokens=max_tokens,
                do_sample=False,
                pad_token_id=self.tokenizer.pad_token_id,
                streamer=clock,
            )
        end = time.perf_counter()
        wave = Wave(prefill_s=clock.steps[0] - start, decode_s=end - clock.steps[0])
        for row in output[:, input_ids.shape[1] :].tolist():
            ends = [i for i, token in enumerate(row) if self.engine.is_end_of_generation(token)]
            tokens = row[: ends[0] + 1] if ends else row
            wave.tokens.append(tokens)
            wave.ttft_s.append(clock.steps[0] - start)
            wave.latency_s.append(clock.steps[len(tokens) - 1] - start)
        return wave
