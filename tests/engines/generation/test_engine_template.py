"""GenerationEngine's shared prepare/step/release and the scheduler's StepModel, without a real model."""

from __future__ import annotations

import ast
import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest

import engines.generation.scheduler as scheduler_module
from engines.base import ModelSpec
from engines.errors import InputTooLongError, InvalidArgumentError
from engines.executor import DeviceExecutor
from engines.generation.base import GenerationEngine, SequenceState
from engines.generation.scheduler import ContinuousBatchScheduler, StepResult
from engines.generation.sequence import GenerationSequence
from engines.types import ChatMessage, FinishReason, GenerationRequest, SamplingParams, Task
from tests.python_source import parse_file
from tests.stand_in_engine import StandInEngine
from tests.streams import FinishedSequences

EOS = 0


class FakeEngine(GenerationEngine, StandInEngine):
    """Characters are tokens (``ord``); every step emits the next character of ``reply``."""

    backend = "fake-generation"

    def __init__(self, template: str | None = "{{ messages }}", reply: str = "hi") -> None:
        spec = ModelSpec(name="fake", backend=self.backend, tasks=(Task.GENERATE,), source="")
        super().__init__(spec, "cpu", DeviceExecutor("cpu"))
        self.context_length = 16
        self.vocab_size = 256
        self.reply = reply
        self.calls: list[tuple[str, list[str]]] = []
        self._set_chat_template(template)
        self.render_error: Exception | None = None

    def is_end_of_generation(self, token_id: int) -> bool:
        return token_id == EOS

    def token_bytes(self, token_id: int) -> bytes:
        return bytes([token_id])

    def _render_chat(
        self, messages: list[dict[str, Any]], tools: list | None, add_generation_prompt: bool = True
    ) -> str:
        if self.render_error is not None:
            raise self.render_error
        return "".join(m["content"] for m in messages)

    def _tokenize(self, text: str, *, templated: bool, add_special: bool | None = None) -> list[int]:
        return [ord(c) for c in text]

    def _token_strings(self, ids: list[int]) -> list[str]:
        return [chr(i) for i in ids]

    def _offsets(self, text: str, ids: list[int], *, templated: bool, add_special: bool | None) -> list:
        return [(i, i + 1) for i in range(len(ids))]

    def _detokenize(self, ids: list[int], skip_special_tokens: bool) -> str:
        return "".join(chr(i) for i in ids)

    def _new_state(self, request: GenerationRequest) -> SequenceState:
        return SequenceState(sampler=None, logprobs=False, top_logprobs=0)

    def _forward(self, running: list[GenerationSequence]) -> list[StepResult]:
        self.calls.append(("forward", [s.request_id for s in running]))
        results: list[StepResult] = []
        for sequence in running:
            state: SequenceState = sequence.engine_state
            token = ord(self.reply[state.n_past]) if state.n_past < len(self.reply) else EOS
            state.n_past += 1
            results.append((sequence, token, None))
        return results

    def _free(self, sequences: list[GenerationSequence]) -> None:
        self.calls.append(("free", [s.request_id for s in sequences]))


def request(request_id: str = "r", **kwargs: Any) -> GenerationRequest:
    kwargs.setdefault("prompt", "ab")
    return GenerationRequest(request_id=request_id, **kwargs)


def test_scheduler_does_not_import_the_engine_base():
    tree = parse_file(Path(scheduler_module.__file__))
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {
        alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
    }
    assert not any(name and name.startswith("engines.generation.base") for name in imported)


def test_prepare_checks_logit_bias_before_anything_else():
    engine = FakeEngine(template=None)
    bad = request(
        messages=[ChatMessage(role="user", content="x")],
        prompt=None,
        params=SamplingParams(logit_bias={300: 1.0}),
    )
    with pytest.raises(InvalidArgumentError) as caught:
        engine.prepare(bad)
    assert caught.value.metadata == {"field": "parameters.logit_bias"}


def test_prepare_chat_template_errors():
    chat = request(messages=[ChatMessage(role="user", content="x")], prompt=None)
    with pytest.raises(InvalidArgumentError) as caught:
        FakeEngine(template=None).prepare(chat)
    assert caught.value.reason == "NO_CHAT_TEMPLATE"
    engine = FakeEngine()
    engine.render_error = ValueError("no system role")
    with pytest.raises(InvalidArgumentError) as caught:
        engine.prepare(chat)
    assert caught.value.reason == "CHAT_TEMPLATE_ERROR"
    assert "no system role" in caught.value.message


def test_prepare_length_checks():
    engine = FakeEngine()
    with pytest.raises(InvalidArgumentError) as caught:
        engine.prepare(request(prompt=""))
    assert caught.value.metadata == {"field": "prompt"}
    with pytest.raises(InputTooLongError):
        engine.prepare(request(prompt="x" * 16))
    sequence = engine.prepare(request(prompt="x" * 10, params=SamplingParams(max_tokens=100)))
    assert sequence.max_new_tokens == 6


def test_step_frees_released_first_and_release_is_idempotent():
    engine = FakeEngine()
    a, b = engine.prepare(request("a")), engine.prepare(request("b"))
    engine.step([b], [a])
    engine.release([a, b])
    engine.release([a, b])
    assert engine.calls == [("free", ["a"]), ("forward", ["b"]), ("free", ["b"])]


async def test_scheduler_streams_through_the_engine():
    engine = FakeEngine(reply="ok")
    finished = FinishedSequences(engine.model_name)
    text = []
    async with contextlib.aclosing(engine.stream(request())) as deltas:
        async for delta in deltas:
            text.append(delta.text)
    assert "".join(text) == "ok"
    assert delta.finish_reason == FinishReason.STOP
    await finished.wait("stop", 1)  # counted when it leaves the batch, at the loop's next turn
    assert ("free", ["r"]) in engine.calls
    assert isinstance(engine.scheduler, ContinuousBatchScheduler)
    engine.executor.shutdown()


async def test_drain_returns_once_a_cancelled_sequence_is_released():
    engine = FakeEngine(reply="a long reply that will not finish")
    finished = FinishedSequences(engine.model_name)
    deltas = engine.stream(request("gone"))
    await anext(deltas)
    await deltas.aclose()  # the caller went away mid-generation: the loop releases it later
    assert ("free", ["gone"]) not in engine.calls
    await asyncio.wait_for(engine.drain(), 5)
    assert ("free", ["gone"]) in engine.calls
    assert finished.count("cancelled") == 1
    assert engine.scheduler.active_count == 0
    engine.executor.shutdown()
