"""InferenceService generation RPCs: Generate and GenerateStream."""

from __future__ import annotations

import contextlib
import time
import uuid

import grpc
from universal_runtime.v1 import common_pb2, generation_pb2

from engines.types import Task
from service.convert.generation import FINISH_REASONS, generation_request, usage_message
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


class GenerationRpcs(RpcBase):
    """Generate and GenerateStream over the model manager's generation engines."""

    async def _generate(self, request, context: grpc.aio.ServicerContext):
        """Shared by Generate and GenerateStream: yields stream responses."""
        started = time.perf_counter()
        completion_id = f"gen-{uuid.uuid4().hex}"
        job = generation_request(
            request,
            request_id_var.get(),
            max_tokens_limit=self._settings.max_tokens_limit,
            max_choices=self._settings.max_choices,
        )
        note_model(request.model)
        async with self._manager.acquire(request.model, Task.GENERATE, request.keep_alive or None) as engine:
            first_token: float | None = None
            async with contextlib.aclosing(engine.stream(job)) as deltas:
                async for delta in deltas:
                    if first_token is None and delta.token_ids:
                        first_token = time.perf_counter()
                    message = generation_pb2.GenerateStreamResponse(
                        id=completion_id,
                        model=request.model,
                        index=0,
                        text=delta.text,
                        token_ids=delta.token_ids,
                    )
                    if delta.finish_reason is not None:
                        message.finish_reason = FINISH_REASONS[delta.finish_reason]
                        usage = delta.usage
                        assert usage is not None
                        message.usage.CopyFrom(usage_message(usage.prompt_tokens, usage.completion_tokens))
                        message.timings.CopyFrom(
                            _timings(started, first_token, time.perf_counter(), usage.completion_tokens)
                        )
                    yield message

    async def GenerateStream(
        self, request: generation_pb2.GenerateStreamRequest, context: grpc.aio.ServicerContext
    ):
        """Stream tokens as they are generated; the last message has finish_reason, usage, timings."""
        async for message in self._generate(request, context):
            yield message

    async def Generate(
        self, request: generation_pb2.GenerateRequest, context: grpc.aio.ServicerContext
    ) -> generation_pb2.GenerateResponse:
        """Generate a whole completion and return it at once."""
        text: list[str] = []
        response = generation_pb2.GenerateResponse(model=request.model)
        choice = generation_pb2.GenerateChoice(index=0)
        async for message in self._generate(request, context):
            response.id = message.id
            text.append(message.text)
            if message.finish_reason:
                choice.finish_reason = message.finish_reason
                response.usage.CopyFrom(message.usage)
                response.timings.CopyFrom(message.timings)
        choice.text = "".join(text)
        response.choices.append(choice)
        return response
