"""InferenceService in a backend: the RPCs of its one model, with the server's messages and errors.

Each RPC converts its request with the server's own converters (:mod:`service.convert`, within
the limits the server passed), calls the engine's capability method directly
(:mod:`engines.capabilities`), and converts the result back with the server's response encoders,
so that an answer or an error is the one the server gives for the same request. Served:
Embed, Rerank, Classify, ExtractEntities, GenerateStream (one choice: the server's proxy fans
``n`` out), Tokenize, Detokenize, Transcribe, SynthesizeSpeech, ListVoices and GenerateImage;
every other RPC (unary Generate included: the proxy streams) answers UNIMPLEMENTED.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import grpc
from google.protobuf.message import Message
from universal_runtime.v1 import (
    encoders_pb2,
    generation_pb2,
    images_pb2,
    inference_service_pb2,
    inference_service_pb2_grpc,
    speech_pb2,
    tokenization_pb2,
)

from engines.capabilities import (
    Classifier,
    Embedder,
    EntityExtractor,
    ImageGenerator,
    Reranker,
    SpeechSynthesizer,
    TextGenerator,
    Tokenizer,
    Transcriber,
)
from engines.errors import InvalidArgumentError
from engines.generation.json_grammar import compile_in_worker, validate_output_constraint
from engines.types import GenerationUsage
from service.backend.calls import stream_rpc, unary_rpc
from service.backend.model import BackendModel
from service.convert import encoders, generation, images, speech, tokenization
from service.convert.embedding import embed_response, embedding_request
from service.convert.uploads import read_upload
from service.request_context import note_model, request_id_var
from service.settings import Settings
from service.tasks.generation import ChoiceDelta, Timings

SERVICE = inference_service_pb2.DESCRIPTOR.services_by_name["InferenceService"]
PREFIX = SERVICE.full_name

#: The InferenceService RPCs a backend serves; the others answer UNIMPLEMENTED.
SERVED_METHODS = frozenset(
    {
        "Embed",
        "Rerank",
        "Classify",
        "ExtractEntities",
        "GenerateStream",
        "Tokenize",
        "Detokenize",
        "Transcribe",
        "SynthesizeSpeech",
        "ListVoices",
        "GenerateImage",
    }
)

INLINE_REQUEST_BYTES = 16 * 1024
"""Largest serialized request converted on the event loop; larger ones go to a worker thread (as
the server's :func:`service.servicers.inference.convert_request`)."""

Result = TypeVar("Result")


async def convert_request(
    request: Message, convert: Callable[..., Result], *args: Any, **kwargs: Any
) -> Result:
    """``convert(request, *args, **kwargs)``: inline for a small request, in a worker thread for a large one.

    Raises:
        Whatever ``convert`` raises (the converters' InvalidArgumentError).

    """
    if request.ByteSize() > INLINE_REQUEST_BYTES:
        return await asyncio.to_thread(convert, request, *args, **kwargs)
    return convert(request, *args, **kwargs)


def stream_timings(
    started: float, first_token: float | None, finished: float, completion_tokens: int
) -> Timings:
    """A stream's timings from ``time.perf_counter`` marks (seconds), as the server computes them.

    Returns:
        Time to first token and total in milliseconds; tokens per second over the tokens after
        the first (0 with fewer than two tokens).

    """
    ttft = (first_token - started) * 1000 if first_token else 0.0
    decode_s = finished - first_token if first_token else 0.0
    tps = (completion_tokens - 1) / decode_s if completion_tokens > 1 and decode_s > 0 else 0.0
    return Timings(time_to_first_token_ms=ttft, tokens_per_second=tps, total_ms=(finished - started) * 1000)


class BackendInferenceServicer(inference_service_pb2_grpc.InferenceServiceServicer):
    """The served subset of ``universal_runtime.v1.InferenceService`` over the backend's model.

    Errors are the server's: the converters' INVALID_ARGUMENT, FAILED_PRECONDITION
    (TASK_NOT_SUPPORTED) for a task the model does not serve, UNAVAILABLE before the load or
    while closing, the engine's own domain errors, INTERNAL for anything else.

    Args:
        settings: The limits the converters enforce (``max_tokens_limit``, ``max_choices``,
            ``max_batch_inputs``), the server's.
        model: The backend's one model.

    """

    def __init__(self, settings: Settings, model: BackendModel) -> None:
        self._settings = settings
        self._model = model

    def model_evicted(self, call: asyncio.Task | None) -> bool:
        """Whether the model's close cancelled ``call`` (read by ``calls.stream_rpc``)."""
        return self._model.evicted(call)

    # -- encoders ---------------------------------------------------------------------------

    @unary_rpc(f"{PREFIX}/Embed")
    async def Embed(self, request: encoders_pb2.EmbedRequest, context: grpc.aio.ServicerContext) -> Message:
        """Vectors of the inputs, in input order (``dimensions`` floats each)."""
        job = embedding_request(request, max_inputs=self._settings.max_batch_inputs)
        note_model(request.model)
        with self._model.use(Embedder) as embedder:
            return embed_response(request.model, await embedder.embed(job))

    @unary_rpc(f"{PREFIX}/Rerank")
    async def Rerank(self, request: encoders_pb2.RerankRequest, context: grpc.aio.ServicerContext) -> Message:
        """Documents sorted by relevance to the query, best first."""
        job = encoders.rerank_request(request, max_inputs=self._settings.max_batch_inputs)
        note_model(request.model)
        with self._model.use(Reranker) as reranker:
            return encoders.rerank_response(request.model, await reranker.rerank(job))

    @unary_rpc(f"{PREFIX}/Classify")
    async def Classify(
        self, request: encoders_pb2.ClassifyRequest, context: grpc.aio.ServicerContext
    ) -> Message:
        """One classification per input, in order (the model's own head, or zero-shot labels)."""
        job = encoders.classification_request(request, max_inputs=self._settings.max_batch_inputs)
        note_model(request.model)
        with self._model.use(Classifier) as classifier:
            return encoders.classify_response(request.model, await classifier.classify(job))

    @unary_rpc(f"{PREFIX}/ExtractEntities")
    async def ExtractEntities(
        self, request: encoders_pb2.ExtractEntitiesRequest, context: grpc.aio.ServicerContext
    ) -> Message:
        """Entities of each input, in order of appearance."""
        job = encoders.entity_request(request, max_inputs=self._settings.max_batch_inputs)
        note_model(request.model)
        with self._model.use(EntityExtractor) as extractor:
            return encoders.entities_response(request.model, await extractor.extract_entities(job))

    # -- tokenization -----------------------------------------------------------------------

    @unary_rpc(f"{PREFIX}/Tokenize")
    async def Tokenize(
        self, request: tokenization_pb2.TokenizeRequest, context: grpc.aio.ServicerContext
    ) -> Message:
        """Token ids of the prompt, or of the messages rendered by the chat template."""
        job = await convert_request(
            request, tokenization.tokenize_request, max_tokens_limit=self._settings.max_tokens_limit
        )
        note_model(request.model)
        with self._model.use(Tokenizer) as tokenizer:
            return tokenization.tokenize_response(request.model, await tokenizer.tokenize(job))

    @unary_rpc(f"{PREFIX}/Detokenize")
    async def Detokenize(
        self, request: tokenization_pb2.DetokenizeRequest, context: grpc.aio.ServicerContext
    ) -> Message:
        """The text of the token ids."""
        job = await convert_request(request, tokenization.detokenize_request)
        note_model(request.model)
        with self._model.use(Tokenizer) as tokenizer:
            return tokenization.detokenize_response(request.model, await tokenizer.detokenize(job))

    # -- generation -------------------------------------------------------------------------

    @stream_rpc(f"{PREFIX}/GenerateStream")
    async def GenerateStream(
        self, request: generation_pb2.GenerateStreamRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[generation_pb2.GenerateStreamResponse]:
        """One message per engine delta of one choice (index 0); the last has usage and timings.

        The request id (metadata ``x-request-id``) is the engine request's. A client that
        cancels, or whose deadline passes, cancels the engine's stream (its slot is freed).

        Raises:
            InvalidArgumentError: what the converter refuses, or ``n`` other than 1 (field
                ``parameters.n``: the server's proxy sends one choice per call).

        """
        job = await convert_request(
            request,
            generation.generation_request,
            request_id_var.get(),
            max_tokens_limit=self._settings.max_tokens_limit,
            max_choices=self._settings.max_choices,
        )
        n = generation.choice_count(request)
        if n != 1:
            raise InvalidArgumentError(
                f"parameters.n: a backend generates one choice per call, got {n}", field="parameters.n"
            )
        note_model(request.model)
        started = time.perf_counter()
        with self._model.use(TextGenerator) as generator:
            # Bounded schema and grammar before a slot is taken, off the lane (as the server's task).
            if job.response_format.json_schema is not None or job.tools:
                await compile_in_worker(validate_output_constraint, job)
            completion_id = f"gen-{uuid.uuid4().hex}"
            first_token: float | None = None
            async with contextlib.aclosing(generator.stream(job)) as deltas:
                async for delta in deltas:
                    if delta.token_ids and first_token is None:
                        first_token = time.perf_counter()
                    event = ChoiceDelta(completion_id, 0, delta)
                    if delta.finish_reason is not None:
                        usage = delta.usage or GenerationUsage()
                        event.usage = usage
                        event.timings = stream_timings(
                            started, first_token, time.perf_counter(), usage.completion_tokens
                        )
                    yield generation.stream_response(request.model, event)

    # -- speech -----------------------------------------------------------------------------

    @stream_rpc(f"{PREFIX}/Transcribe")
    async def Transcribe(
        self, request_iterator: AsyncIterator[speech_pb2.TranscribeRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[speech_pb2.TranscribeResponse]:
        """The audio's info, then each segment as it is recognized (bounded by the server's audio limits)."""
        job, data = await read_upload(
            request_iterator,
            self._settings,
            speech.transcription_job,
            max_bytes=self._settings.audio_max_bytes,
        )
        note_model(job.model)
        with self._model.use(Transcriber) as transcriber:
            transcriber.resolve_language(job.options.language)
            async with contextlib.aclosing(transcriber.transcribe(data, job.limits, job.options)) as events:
                async for event in events:
                    yield speech.transcribe_response(event)

    @stream_rpc(f"{PREFIX}/SynthesizeSpeech")
    async def SynthesizeSpeech(
        self, request: speech_pb2.SynthesizeSpeechRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[speech_pb2.SynthesizeSpeechResponse]:
        """The encoded speech of the input, a sentence at a time."""
        job = speech.speech_job(request, self._settings)
        note_model(job.model)
        with self._model.use(SpeechSynthesizer) as synthesizer:
            pieces = synthesizer.synthesize(job.text, job.options, job.audio_format)
            async with contextlib.aclosing(pieces) as audio:
                first = True
                async for piece in audio:
                    yield speech.speech_response(piece, job.audio_format, first)
                    first = False

    @unary_rpc(f"{PREFIX}/ListVoices")
    async def ListVoices(
        self, request: speech_pb2.ListVoicesRequest, context: grpc.aio.ServicerContext
    ) -> Message:
        """The model's voices, its default first."""
        note_model(request.model)
        with self._model.use(SpeechSynthesizer) as synthesizer:
            return speech.voices_response(await synthesizer.voices())

    # -- images -----------------------------------------------------------------------------

    @stream_rpc(f"{PREFIX}/GenerateImage")
    async def GenerateImage(
        self, request: images_pb2.GenerateImageRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[images_pb2.GenerateImageResponse]:
        """Each image's progress while it denoises, then the image, within the server's limits."""
        job = images.image_job(request, self._settings)
        note_model(job.model)
        with self._model.use(ImageGenerator) as generator:
            async with contextlib.aclosing(generator.generate(job.request, job.limits)) as events:
                async for event in events:
                    yield images.image_response(event)


def _unimplemented(name: str) -> Callable[..., Any]:
    """An async handler that answers UNIMPLEMENTED for ``name`` (any request shape)."""

    async def handler(self: Any, request: Any, context: grpc.aio.ServicerContext) -> None:
        await context.abort(
            grpc.StatusCode.UNIMPLEMENTED, f"{PREFIX}/{name} is not served by a model backend"
        )

    handler.__name__ = handler.__qualname__ = name
    handler.__doc__ = f"UNIMPLEMENTED: {name} is served by the server itself, never by a backend."
    return handler


for _method in SERVICE.methods:
    if _method.name not in SERVED_METHODS:
        setattr(BackendInferenceServicer, _method.name, _unimplemented(_method.name))
