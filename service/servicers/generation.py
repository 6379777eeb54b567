"""InferenceService generation RPCs: Generate and GenerateStream."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import time
import uuid
from collections.abc import AsyncIterator

import grpc
from universal_runtime.v1 import common_pb2, generation_pb2

from engines.generation.base import GenerationEngine
from engines.types import GenerationDelta, GenerationRequest, Task, TokenLogprobs
from service.convert.generation import FINISH_REASONS, choice_count, generation_request, usage_message
from service.request_context import note_model, request_id_var
from service.servicers.base import RpcBase


def _timings(
    started: float, first_token: float | None, finished: float, completion_tokens: int
) -> common_pb2.Timings:
    """Server-side timings; tokens/s counts the tokens after the first over the decode time."""
    ttft = (first_token - started) * 1000 if first_token else 0.0
    decode_s = finished - first_token if first_token else 0.0
    tps = (completion_tokens - 1) / decode_s if completion_tokens > 1 and decode_s > 0 else 0.0
    return common_pb2.Timings(
        time_to_first_token_ms=ttft, tokens_per_second=tps, total_ms=(finished - started) * 1000
    )


def _logprobs_message(scored: TokenLogprobs) -> generation_pb2.TokenLogprobs:
    def one(entry) -> generation_pb2.TokenLogprob:
        return generation_pb2.TokenLogprob(token_id=entry.token_id, token=entry.token, logprob=entry.logprob)

    return generation_pb2.TokenLogprobs(
        sampled=one(scored.sampled), top_logprobs=[one(e) for e in scored.top]
    )


def _choice_requests(job: GenerationRequest, n: int) -> list[GenerationRequest]:
    """One engine request per choice; choice i of a seeded request uses seed + i (reproducible)."""
    if n == 1:
        return [job]
    base_seed = job.params.seed if job.params.seed is not None else random.randrange(2**31)
    return [
        dataclasses.replace(
            job,
            request_id=f"{job.request_id}/{i}",
            params=dataclasses.replace(job.params, seed=base_seed + i),
        )
        for i in range(n)
    ]


async def _merge_choices(
    engine: GenerationEngine, jobs: list[GenerationRequest]
) -> AsyncIterator[tuple[int, GenerationDelta]]:
    """Run the choices concurrently (they batch together) and yield (choice index, delta) as they come."""
    if len(jobs) == 1:
        async with contextlib.aclosing(engine.stream(jobs[0])) as deltas:
            async for delta in deltas:
                yield 0, delta
        return
    queue: asyncio.Queue[tuple[int, GenerationDelta] | BaseException | None] = asyncio.Queue()

    async def pump(index: int, job: GenerationRequest) -> None:
        try:
            async with contextlib.aclosing(engine.stream(job)) as deltas:
                async for delta in deltas:
                    queue.put_nowait((index, delta))
        except Exception as exc:
            queue.put_nowait(exc)
        finally:
            queue.put_nowait(None)

    tasks = [asyncio.create_task(pump(i, job)) for i, job in enumerate(jobs)]
    try:
        remaining = len(tasks)
        while remaining:
            item = await queue.get()
            if item is None:
                remaining -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class GenerationRpcs(RpcBase):
    """Generate and GenerateStream over the model manager's generation engines."""

    async def _generate(self, request, context: grpc.aio.ServicerContext):
        """Shared by Generate and GenerateStream: yields stream responses, one per delta."""
        started = time.perf_counter()
        completion_id = f"gen-{uuid.uuid4().hex}"
        job = generation_request(
            request,
            request_id_var.get(),
            max_tokens_limit=self._settings.max_tokens_limit,
            max_choices=self._settings.max_choices,
        )
        jobs = _choice_requests(job, choice_count(request))
        note_model(request.model)
        prompt_tokens = completion_tokens = cached_tokens = 0
        open_choices = len(jobs)
        first_token: float | None = None
        async with self._manager.acquire(request.model, Task.GENERATE, request.keep_alive or None) as engine:
            async for index, delta in _merge_choices(engine, jobs):
                if first_token is None and delta.token_ids:
                    first_token = time.perf_counter()
                message = generation_pb2.GenerateStreamResponse(
                    id=completion_id,
                    model=request.model,
                    index=index,
                    text=delta.text,
                    token_ids=delta.token_ids,
                    logprobs=[_logprobs_message(s) for s in delta.logprobs],
                    tool_calls=[
                        generation_pb2.ToolCallDelta(
                            index=c.index, id=c.id, name=c.name, arguments_json_delta=c.arguments_delta
                        )
                        for c in delta.tool_calls
                    ],
                )
                if delta.finish_reason is not None:
                    message.finish_reason = FINISH_REASONS[delta.finish_reason]
                    assert delta.usage is not None
                    prompt_tokens = delta.usage.prompt_tokens  # the same prompt for every choice
                    # Choices run in separate slots: report the prompt cache's best hit.
                    cached_tokens = max(cached_tokens, delta.usage.cached_prompt_tokens)
                    completion_tokens += delta.usage.completion_tokens
                    open_choices -= 1
                    if open_choices == 0:
                        message.usage.CopyFrom(usage_message(prompt_tokens, completion_tokens, cached_tokens))
                        message.timings.CopyFrom(
                            _timings(started, first_token, time.perf_counter(), completion_tokens)
                        )
                yield message

    async def GenerateStream(
        self, request: generation_pb2.GenerateStreamRequest, context: grpc.aio.ServicerContext
    ):
        """Stream tokens as they are generated; the last message has usage and timings."""
        async for message in self._generate(request, context):
            yield message

    async def Generate(
        self, request: generation_pb2.GenerateRequest, context: grpc.aio.ServicerContext
    ) -> generation_pb2.GenerateResponse:
        """Generate whole completions and return them at once."""
        response = generation_pb2.GenerateResponse(model=request.model)
        choices: dict[int, generation_pb2.GenerateChoice] = {}
        texts: dict[int, list[str]] = {}
        calls: dict[tuple[int, int], generation_pb2.ToolCall] = {}
        async for message in self._generate(request, context):
            response.id = message.id
            choice = choices.setdefault(message.index, generation_pb2.GenerateChoice(index=message.index))
            texts.setdefault(message.index, []).append(message.text)
            choice.logprobs.extend(message.logprobs)
            for piece in message.tool_calls:
                call = calls.get((message.index, piece.index))
                if call is None:
                    call = calls[(message.index, piece.index)] = choice.tool_calls.add()
                call.id = call.id or piece.id
                call.name = call.name or piece.name
                call.arguments_json += piece.arguments_json_delta
            if message.finish_reason:
                choice.finish_reason = message.finish_reason
            if message.HasField("usage"):
                response.usage.CopyFrom(message.usage)
                response.timings.CopyFrom(message.timings)
        for index in sorted(choices):
            choices[index].text = "".join(texts[index])
            response.choices.append(choices[index])
        return response
