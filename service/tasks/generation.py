"""Generation: choice fan-out for ``n``, merging of concurrent choices, usage and timing totals."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from engines.capabilities import TextGenerator
from engines.generation.json_grammar import compile_in_worker, validate_output_constraint
from engines.types import (
    FinishReason,
    GenerationDelta,
    GenerationRequest,
    GenerationUsage,
    TokenLogprobs,
    ToolCall,
)
from service import metrics
from service.model_manager import ModelManager


@dataclass(frozen=True, slots=True)
class Timings:
    """Server-side timings of one call, in milliseconds and tokens per second."""

    time_to_first_token_ms: float = 0.0
    tokens_per_second: float = 0.0  # tokens after the first over the decode time
    total_ms: float = 0.0


@dataclass(slots=True)
class ChoiceDelta:
    """One step of one choice; the last event of the call carries the totals.

    Attributes:
        completion_id: the call's id (``gen-`` and 32 hex characters), the same on every event.
        index: the choice (0..n-1).
        delta: what the engine produced.
        usage: on the call's last event only: the prompt once, completion tokens of every choice,
            the best prompt-cache hit among the choices.
        timings: on the call's last event only.

    """

    completion_id: str
    index: int
    delta: GenerationDelta
    usage: GenerationUsage | None = None
    timings: Timings | None = None


@dataclass(slots=True)
class Choice:
    """One whole choice of a unary call."""

    index: int
    text: str = ""
    reasoning_content: str = ""  # a reasoning model's thinking (never part of text)
    logprobs: list[TokenLogprobs] = field(default_factory=list)
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: FinishReason | None = None
    stop_sequence: str = ""  # the stop sequence that ended the choice, if one did


@dataclass(slots=True)
class Completion:
    """A unary call's result: choices in index order, usage and timings."""

    completion_id: str
    choices: list[Choice]
    usage: GenerationUsage
    timings: Timings


def _timings(started: float, first_token: float | None, finished: float, completion_tokens: int) -> Timings:
    """Timings from ``time.perf_counter`` marks (seconds)."""
    ttft = (first_token - started) * 1000 if first_token else 0.0
    decode_s = finished - first_token if first_token else 0.0
    tps = (completion_tokens - 1) / decode_s if completion_tokens > 1 and decode_s > 0 else 0.0
    return Timings(time_to_first_token_ms=ttft, tokens_per_second=tps, total_ms=(finished - started) * 1000)


def _choice_requests(request: GenerationRequest, n: int) -> list[GenerationRequest]:
    """One engine request per choice; choice i of a seeded request uses seed + i (reproducible)."""
    if n == 1:
        return [request]
    base_seed = request.params.seed if request.params.seed is not None else random.randrange(2**31)
    return [
        dataclasses.replace(
            request,
            request_id=f"{request.request_id}/{i}",
            params=dataclasses.replace(request.params, seed=base_seed + i),
        )
        for i in range(n)
    ]


async def _merge_choices(
    generator: TextGenerator, requests: list[GenerationRequest]
) -> AsyncIterator[tuple[int, GenerationDelta]]:
    """Run the choices concurrently (they batch together) and yield (choice index, delta) as they come.

    The queue holds at most every delta of every choice, bounded by ``n * max_tokens``.
    """
    if len(requests) == 1:
        async with contextlib.aclosing(generator.stream(requests[0])) as deltas:
            async for delta in deltas:
                yield 0, delta
        return
    queue: asyncio.Queue[tuple[int, GenerationDelta] | BaseException | None] = asyncio.Queue()

    async def pump(index: int, request: GenerationRequest) -> None:
        try:
            async with contextlib.aclosing(generator.stream(request)) as deltas:
                async for delta in deltas:
                    queue.put_nowait((index, delta))
        except Exception as exc:
            queue.put_nowait(exc)
        finally:
            queue.put_nowait(None)

    pumps = [asyncio.create_task(pump(i, r)) for i, r in enumerate(requests)]
    try:
        remaining = len(pumps)
        while remaining:
            item = await queue.get()
            if item is None:
                remaining -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item
    finally:
        for pump_task in pumps:
            pump_task.cancel()
        await asyncio.gather(*pumps, return_exceptions=True)


class GenerationTask:
    """Generate and GenerateStream over the model manager's text generators.

    Args:
        manager: where generators are acquired.

    """

    def __init__(self, manager: ModelManager) -> None:
        self._manager = manager

    async def stream(
        self, model: str, keep_alive: str | None, request: GenerationRequest, n: int = 1
    ) -> AsyncIterator[ChoiceDelta]:
        """Yield every choice's deltas as they come; the last event carries usage and timings.

        Args:
            model: catalog name of a model serving ``generate``.
            keep_alive: optional keep-alive override.
            request: the validated request (``max_tokens`` bounds each choice).
            n: choices (validated by the caller against ``max_choices``).

        Raises:
            InvalidArgumentError: the output constraint's schema or grammar exceeds a bound
                (reason JSON_SCHEMA_TOO_COMPLEX) or cannot be enforced (INVALID_JSON_SCHEMA).
            Errors of :meth:`ModelManager.acquire` and of the generator (see ``TextGenerator``).

        """
        started = time.perf_counter()
        # Bounded schema and grammar before a model slot is taken or native code runs; off the
        # event loop and off the lane, stopped when this call is cancelled, cached for the engine.
        if request.response_format.json_schema is not None or request.tools:
            await compile_in_worker(validate_output_constraint, request)
        completion_id = f"gen-{uuid.uuid4().hex}"
        requests = _choice_requests(request, n)
        usage = GenerationUsage()
        open_choices = len(requests)
        first_token: float | None = None
        last_token: dict[int, float] = {}  # per choice, for the inter-token latency
        async with self._manager.acquire(model, TextGenerator, keep_alive) as generator:
            async for index, delta in _merge_choices(generator, requests):
                if delta.token_ids:
                    now = time.perf_counter()
                    previous = last_token.get(index)
                    metrics.generation_token(
                        model, None if previous is None else now - previous, now - started
                    )
                    last_token[index] = now
                    if first_token is None:
                        first_token = now
                event = ChoiceDelta(completion_id, index, delta)
                if delta.finish_reason is not None:
                    assert delta.usage is not None
                    usage.prompt_tokens = delta.usage.prompt_tokens  # the same prompt for every choice
                    # Choices run in separate slots: report the prompt cache's best hit.
                    usage.cached_prompt_tokens = max(
                        usage.cached_prompt_tokens, delta.usage.cached_prompt_tokens
                    )
                    usage.completion_tokens += delta.usage.completion_tokens
                    usage.reasoning_tokens += delta.usage.reasoning_tokens
                    usage.draft_tokens += delta.usage.draft_tokens
                    usage.accepted_draft_tokens += delta.usage.accepted_draft_tokens
                    open_choices -= 1
                    if open_choices == 0:
                        finished = time.perf_counter()
                        event.usage = usage
                        event.timings = _timings(started, first_token, finished, usage.completion_tokens)
                        metrics.generation_finished(
                            model,
                            finished - started,
                            usage.prompt_tokens,
                            usage.completion_tokens,
                            usage.cached_prompt_tokens,
                        )
                yield event

    async def complete(
        self, model: str, keep_alive: str | None, request: GenerationRequest, n: int = 1
    ) -> Completion:
        """Whole choices at once: :meth:`stream` merged per choice (same arguments and errors)."""
        choices: dict[int, Choice] = {}
        texts: dict[int, list[str]] = {}
        thoughts: dict[int, list[str]] = {}
        calls: dict[tuple[int, int], ToolCall] = {}
        completion_id, usage, timings = "", GenerationUsage(), Timings()
        async with contextlib.aclosing(self.stream(model, keep_alive, request, n)) as events:
            async for event in events:
                completion_id = event.completion_id
                choice = choices.setdefault(event.index, Choice(index=event.index))
                delta = event.delta
                texts.setdefault(event.index, []).append(delta.text)
                thoughts.setdefault(event.index, []).append(delta.reasoning)
                choice.logprobs.extend(delta.logprobs)
                for piece in delta.tool_calls:
                    call = calls.get((event.index, piece.index))
                    if call is None:
                        call = calls[(event.index, piece.index)] = ToolCall(id="", name="", arguments_json="")
                        choice.tool_calls.append(call)
                    call.id = call.id or piece.id
                    call.name = call.name or piece.name
                    call.arguments_json += piece.arguments_delta
                if delta.finish_reason is not None:
                    choice.finish_reason = delta.finish_reason
                    choice.stop_sequence = delta.stop_sequence
                if event.usage is not None and event.timings is not None:
                    usage, timings = event.usage, event.timings
        for index, choice in choices.items():
            choice.text = "".join(texts[index])
            choice.reasoning_content = "".join(thoughts[index])
        return Completion(completion_id, [choices[i] for i in sorted(choices)], usage, timings)
