"""The engine the model manager holds for a model served by a backend process.

:class:`RemoteEngine` has the surface the manager and the tasks use (``load``, ``unload``,
``drain``, ``memory_usage``, ``stats`` and the capability methods of
:mod:`engines.capabilities`); each capability call crosses the backend's socket as the
InferenceService message of the same call (:mod:`.wire`), and comes back as the same result or
the same domain error an engine in this process would have given. A backend that exits ends only
its own calls in flight, with :class:`~engines.errors.BackendExitedError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
from universal_runtime.v1 import backend_service_pb2 as backend_pb2
from universal_runtime.v1 import backend_service_pb2_grpc as backend_grpc
from universal_runtime.v1 import inference_service_pb2_grpc, speech_pb2

from engines.base import Engine
from engines.device import cuda_free_bytes_from_driver
from engines.encoder_types import (
    ClassificationRequest,
    ClassificationResult,
    EntityRequest,
    EntityResult,
    RerankRequest,
    RerankResult,
)
from engines.errors import BackendExitedError, ModelLoadError, RuntimeServiceError, UnavailableError
from engines.fair_share import current_caller
from engines.images.types import ImageEvent, ImageLimits, ImageRequest
from engines.speech.types import (
    AudioFormat,
    AudioLimits,
    SpeechAudio,
    SpeechOptions,
    TranscriptionEvent,
    TranscriptionOptions,
    Voice,
)
from engines.stats import EncoderStats, EngineStats, GenerationStats, KvCacheStats
from engines.types import (
    DetokenizeRequest,
    EmbeddingRequest,
    EmbeddingResult,
    GenerationDelta,
    GenerationRequest,
    MemoryUsage,
    TokenizeRequest,
    TokenizeResult,
)
from service.model_manager.backends import images_wire, speech_wire, wire
from service.model_manager.backends.errors import STATUS_DETAILS_KEY, error_from_status
from service.model_manager.backends.metadata import call_metadata
from service.model_manager.backends.process import BackendProcess
from service.request_context import request_id_var

log = logging.getLogger("service.backend")

Result = TypeVar("Result")

#: Seconds between reads of a backend's figures (queue, KV cache, memory) for metrics and ps.
STATS_INTERVAL_S = 1.0
#: Longest wait, seconds, for the backend's own work to end on Unload (this server's calls have
#: drained already: :meth:`RemoteEngine.drain`).
UNLOAD_DRAIN_S = 10.0
#: Seconds a backend has to exit after answering Unload, before SIGTERM.
UNLOAD_GRACE_S = 5.0
#: Longest wait, seconds, for a backend whose call failed at the transport to report its exit.
EXIT_REPORT_S = 1.0
#: Status codes of a call that may mean the backend died under it (checked against its exit).
_TRANSPORT_CODES = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.CANCELLED,
    }
)


@dataclass(frozen=True, slots=True)
class BackendProcessInfo:
    """A running backend process, as ``ps`` shows it.

    Attributes:
        pid: its process id.
        started_at: when it started, Unix seconds.
        rss_bytes: resident memory of its process tree, bytes (read at most a second ago).

    """

    pid: int
    started_at: float
    rss_bytes: int


class RemoteEngine:
    """A model served by its own backend process, with the manager's engine surface.

    Args:
        local: the engine class's instance for this entry, never loaded here: it gives the spec,
            device, lane, options and the estimates made before a load (``required_memory``,
            ``free_memory_bytes``).
        start_process: starts a backend process for a model on a device; the process and the
            device's name inside it (:meth:`.launcher.BackendLauncher.start`).
        load_timeout_s: longest wait for the backend's Load, seconds.
        on_exit: called on the event loop with this engine when its backend exits by itself
            (not after :meth:`unload`).
        on_memory: called on the event loop with this engine and its :meth:`memory_usage` each
            time the backend's figures are read (every :data:`STATS_INTERVAL_S`).
        unresponsive_s: a backend whose Stats go unanswered this long (seconds) is killed, and its
            exit handled as any other: its calls end with BACKEND_EXITED.

    """

    def __init__(
        self,
        local: Engine,
        start_process: Callable[[str, str], Awaitable[tuple[BackendProcess, str]]],
        load_timeout_s: float,
        on_exit: Callable[[RemoteEngine], None],
        on_memory: Callable[[RemoteEngine, MemoryUsage], None] | None = None,
        unresponsive_s: float = 30.0,
    ) -> None:
        self.local = local
        self.spec = local.spec
        self.device = local.device
        self.executor = local.executor
        self.options = local.options
        self.engine_class = type(local)
        self.progress: Callable[[str], None] = local.progress
        self.process: BackendProcess | None = None
        self._start_process = start_process
        self._load_timeout_s = load_timeout_s
        self._on_exit = on_exit
        self._on_memory = on_memory
        self._unresponsive_s = unresponsive_s
        self._loop = asyncio.get_running_loop()
        self._stopping = False
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._engine_memory = MemoryUsage()
        self._stats = EngineStats()
        self._rss_bytes = 0
        self._poller: asyncio.Task[None] | None = None

    # -- lifecycle (blocking forms run on the model's lane, as an in-process engine's) -----------

    def configure_lane(self) -> None:
        """Nothing to set on the server's lane: the backend configures its own."""

    def load(self) -> None:
        """Start the backend and load the model in it (blocking; see :meth:`start`)."""
        asyncio.run_coroutine_threadsafe(self.start(), self._loop).result()

    def unload(self) -> None:
        """Stop the backend (blocking; see :meth:`stop`)."""
        asyncio.run_coroutine_threadsafe(self.stop(), self._loop).result()

    async def start(self) -> None:
        """Start a backend process and have it load the model.

        Raises:
            RuntimeServiceError: the backend's load failed with a domain error (a bad option,
                a missing file), or as :class:`~engines.errors.ModelLoadError` when it exited
                or did not answer in time (its exit and last output lines in the message).

        """
        name = self.spec.name
        self.progress("starting backend process")
        try:
            process, inner_device = await self._start_process(name, self.device)
        except (RuntimeError, TimeoutError, OSError) as exc:
            raise ModelLoadError(f"model {name!r}: backend process did not start: {exc}", model=name) from exc
        self.process = process
        request = backend_pb2.LoadRequest(
            model=name,
            backend=self.spec.backend,
            tasks=[task.value for task in self.spec.tasks],
            source=self.spec.source,
            device=inner_device,
            options_json=json.dumps(self.spec.options),
        )
        self.progress("loading in backend process")
        try:
            response = await backend_grpc.BackendServiceStub(process.channel).Load(
                request, timeout=self._load_timeout_s
            )
        except grpc.aio.AioRpcError as exc:
            error = await self._call_error(exc)
            await process.kill()
            if isinstance(error, BackendExitedError):
                # Its output stays in the log: it may name paths and internals a client must not see.
                log.error(
                    "backend process exited while loading",
                    extra={
                        "model": name,
                        "exit": process.exit_description,
                        "last_output": process.last_lines(),
                    },
                )
                raise ModelLoadError(
                    f"model {name!r}: its backend process exited while loading ({process.exit_description}); "
                    "the server log has its last output",
                    model=name,
                ) from exc
            raise error from exc
        self._engine_memory = MemoryUsage(response.memory.ram_bytes, response.memory.vram_bytes)
        self._rss_bytes = await asyncio.to_thread(process.rss_bytes)
        process.on_exit(self._exited)
        self._poller = asyncio.create_task(self._poll_stats(), name=f"backend-stats-{name}")

    @property
    def exited(self) -> bool:
        """Whether its backend process has ended (after :meth:`start`)."""
        return self.process is not None and self.process.exited

    async def drain(self) -> None:
        """Return once no call of this server to the backend is in flight."""
        await self._idle.wait()

    async def stop(self) -> None:
        """End the backend: Unload (it drains and exits), SIGTERM then SIGKILL if it does not."""
        self._stopping = True
        if self._poller is not None:
            self._poller.cancel()
            await asyncio.gather(self._poller, return_exceptions=True)
            self._poller = None  # the task holds this engine: no cycle once unloaded
        process = self.process
        if process is None:
            return
        if not process.exited:
            with contextlib.suppress(grpc.aio.AioRpcError):
                await backend_grpc.BackendServiceStub(process.channel).Unload(
                    backend_pb2.UnloadRequest(drain_timeout_ms=int(UNLOAD_DRAIN_S * 1000)),
                    timeout=UNLOAD_DRAIN_S + UNLOAD_GRACE_S,
                )
            if not await process.wait_exited(UNLOAD_GRACE_S):
                await process.terminate()
        await process.close()
        process.forget_callbacks()  # no cycle keeps this engine alive once unloaded

    def _exited(self, process: BackendProcess) -> None:
        """The backend ended: report it unless the server ended it."""
        if self._poller is not None:
            self._poller.cancel()
        if not self._stopping:
            self._on_exit(self)

    # -- figures ----------------------------------------------------------------------------

    async def _poll_stats(self) -> None:
        """Read the backend's figures every :data:`STATS_INTERVAL_S` while it runs."""
        assert self.process is not None
        stub = backend_grpc.BackendServiceStub(self.process.channel)
        answered = time.monotonic()
        while not self.process.exited:
            try:
                self._take_stats(await stub.Stats(backend_pb2.StatsRequest(), timeout=STATS_INTERVAL_S))
                answered = time.monotonic()
            except grpc.aio.AioRpcError:
                if time.monotonic() - answered > self._unresponsive_s:
                    # A backend that answers nothing (stopped, deadlocked) would hold its model's
                    # callers forever: end it like a crash, and the next request starts another.
                    log.error(
                        "backend process unresponsive; killing it",
                        extra={
                            "model": self.spec.name,
                            "backend_pid": self.process.pid,
                            "seconds": self._unresponsive_s,
                        },
                    )
                    self.process.send_kill()
                    return
            self._rss_bytes = await asyncio.to_thread(self.process.rss_bytes)
            if self._on_memory is not None and not self.process.exited:
                self._on_memory(self, self.memory_usage())
            await asyncio.sleep(STATS_INTERVAL_S)

    def _take_stats(self, answer: backend_pb2.StatsResponse) -> None:
        generation = encoder = None
        if answer.has_generation:
            kv = None
            if answer.HasField("kv_cache"):
                kv = KvCacheStats(
                    answer.kv_cache.cells_used, answer.kv_cache.cells_total, answer.kv_cells_cached
                )
            generation = GenerationStats(answer.sequences_running, answer.sequences_waiting, kv)
        if answer.has_encoder:
            encoder = EncoderStats(
                answer.encoder_queue_depth, answer.encoder_requests_running, answer.encoder_requests_waiting
            )
        self._stats = EngineStats(generation=generation, encoder=encoder)
        self._engine_memory = MemoryUsage(answer.memory.ram_bytes, answer.memory.vram_bytes)

    def memory_usage(self) -> MemoryUsage:
        """What the backend holds: its process tree's resident memory, and its device memory.

        Host memory is measured (the tree's RSS, last read at most :data:`STATS_INTERVAL_S`
        ago): interpreter and libraries included, as the process costs them. Device memory is
        the engine's own count in the backend.
        """
        ram = self._rss_bytes or self._engine_memory.ram_bytes
        return MemoryUsage(ram_bytes=ram, vram_bytes=self._engine_memory.vram_bytes)

    def stats(self) -> EngineStats:
        """The backend's engine figures, as last read (at most :data:`STATS_INTERVAL_S` old)."""
        return self._stats

    def required_memory(self) -> MemoryUsage:
        """The engine class's estimate before a load (:meth:`Engine.required_memory`)."""
        return self.local.required_memory()

    def free_memory_bytes(self) -> int:
        """Bytes free for the model on its device, asked without starting a device runtime here.

        A GPU's free memory comes from the driver (:func:`engines.device.cuda_free_bytes_from_driver`):
        the server starts no CUDA context of its own (each backend starts its runtime). Without
        ``nvidia-smi`` it falls back to the engine class's own way (:meth:`Engine.free_memory_bytes`).
        """
        if self.device.startswith("cuda"):
            free = cuda_free_bytes_from_driver(self.device)
            if free is not None:
                return free
        return self.local.free_memory_bytes()

    # -- calls ------------------------------------------------------------------------------

    def _stub(self) -> inference_service_pb2_grpc.InferenceServiceStub:
        process = self.process
        if process is not None and process.exited:
            raise self.exited_error()  # the exit is being handled: the next request starts another
        if process is None or process.channel is None:
            raise UnavailableError(
                f"model {self.spec.name!r}: its backend process is not running", model=self.spec.name
            )
        return inference_service_pb2_grpc.InferenceServiceStub(process.channel)

    @contextlib.contextmanager
    def _counted(self):
        self._in_flight += 1
        self._idle.clear()
        try:
            yield
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._idle.set()

    async def _call_error(self, exc: grpc.aio.AioRpcError) -> RuntimeServiceError:
        """The domain error of a failed backend call: its own answer, or that the backend exited."""
        answered = any(key == STATUS_DETAILS_KEY for key, _ in exc.trailing_metadata() or ())
        process = self.process
        transport = not answered and exc.code() in _TRANSPORT_CODES
        if transport and process is not None and await process.wait_exited(EXIT_REPORT_S):
            return self.exited_error()
        return error_from_status(exc)

    def exited_error(self) -> BackendExitedError:
        """The error of a call its backend's exit ended (the exit in message and metadata)."""
        process = self.process
        how = process.exit_description if process is not None else "unknown"
        return BackendExitedError(
            f"model {self.spec.name!r}: its backend process exited ({how}) during the call; retry",
            model=self.spec.name,
            exit=how,
        )

    def _metadata(self, request_id: str | None = None) -> tuple[tuple[str, str], ...]:
        return call_metadata(current_caller(), request_id or request_id_var.get())

    async def _unary(self, method: str, request: Any, request_id: str | None = None) -> Any:
        call = getattr(self._stub(), method)
        with self._counted():
            try:
                return await call(request, metadata=self._metadata(request_id))
            except grpc.aio.AioRpcError as exc:
                raise await self._call_error(exc) from None

    async def embed(self, request: EmbeddingRequest) -> EmbeddingResult:
        """:meth:`engines.capabilities.Embedder.embed`, in the backend."""
        return wire.embedding_result(await self._unary("Embed", wire.embed_request(self.spec.name, request)))

    async def rerank(self, request: RerankRequest) -> RerankResult:
        """:meth:`engines.capabilities.Reranker.rerank`, in the backend."""
        return wire.rerank_result(await self._unary("Rerank", wire.rerank_request(self.spec.name, request)))

    async def classify(self, request: ClassificationRequest) -> ClassificationResult:
        """:meth:`engines.capabilities.Classifier.classify`, in the backend."""
        answer = await self._unary("Classify", wire.classify_request(self.spec.name, request))
        return wire.classification_result(answer)

    async def extract_entities(self, request: EntityRequest) -> EntityResult:
        """:meth:`engines.capabilities.EntityExtractor.extract_entities`, in the backend."""
        answer = await self._unary("ExtractEntities", wire.entities_request(self.spec.name, request))
        return wire.entity_result(answer)

    async def tokenize(self, request: TokenizeRequest) -> TokenizeResult:
        """:meth:`engines.capabilities.Tokenizer.tokenize`, in the backend."""
        answer = await self._unary("Tokenize", wire.tokenize_request(self.spec.name, request))
        return wire.tokenize_result(answer)

    async def detokenize(self, request: DetokenizeRequest) -> str:
        """:meth:`engines.capabilities.Tokenizer.detokenize`, in the backend."""
        answer = await self._unary("Detokenize", wire.detokenize_request(self.spec.name, request))
        return wire.detokenize_text(answer)

    async def _streamed(self, method: str, request: Any, request_id: str | None = None) -> AsyncIterator[Any]:
        """The answers of a response-streaming call to the backend, its failure as the domain error.

        Closing the generator early (or cancelling its consumer) cancels the backend's call,
        which stops its work there.
        """
        call = getattr(self._stub(), method)(request, metadata=self._metadata(request_id))
        with self._counted():
            try:
                async for answer in call:
                    yield answer
            except grpc.aio.AioRpcError as exc:
                raise await self._call_error(exc) from None
            finally:
                call.cancel()

    async def stream(self, request: GenerationRequest) -> AsyncIterator[GenerationDelta]:
        """:meth:`engines.capabilities.TextGenerator.stream`, in the backend.

        Closing the generator early (or cancelling its consumer) cancels the backend's stream,
        which frees the sequence's slot there.
        """
        message = wire.generate_stream_request(self.spec.name, request)
        async with contextlib.aclosing(
            self._streamed("GenerateStream", message, request.request_id)
        ) as answers:
            async for answer in answers:
                yield wire.generation_delta(answer)

    def resolve_language(self, language: str | None) -> str | None:
        """:meth:`engines.capabilities.Transcriber.resolve_language`, from the engine class (no call)."""
        return self.local.resolve_language(language)  # type: ignore[attr-defined]

    async def transcribe(
        self, data: bytes, limits: AudioLimits, options: TranscriptionOptions
    ) -> AsyncIterator[TranscriptionEvent]:
        """:meth:`engines.capabilities.Transcriber.transcribe`, in the backend.

        The audio crosses in 1 MiB chunks; the backend bounds it with the server's own limits
        (``audio_max_bytes``, ``audio_max_seconds``), which ``limits`` holds too.
        """
        messages = speech_wire.transcribe_messages(self.spec.name, data, options)
        async with contextlib.aclosing(self._streamed("Transcribe", messages)) as answers:
            async for answer in answers:
                yield speech_wire.transcription_event(answer)

    async def synthesize(
        self, text: str, options: SpeechOptions, audio_format: AudioFormat
    ) -> AsyncIterator[SpeechAudio]:
        """:meth:`engines.capabilities.SpeechSynthesizer.synthesize`, in the backend."""
        message = speech_wire.speech_request(self.spec.name, text, options, audio_format)
        sample_rate = 0
        async with contextlib.aclosing(self._streamed("SynthesizeSpeech", message)) as answers:
            async for answer in answers:
                sample_rate = answer.sample_rate or sample_rate
                yield SpeechAudio(data=answer.audio, sample_rate=sample_rate)

    async def generate(self, request: ImageRequest, limits: ImageLimits) -> AsyncIterator[ImageEvent]:
        """:meth:`engines.capabilities.ImageGenerator.generate`, in the backend.

        The backend checks the request against the server's own ``image_max_*`` settings, which
        ``limits`` holds too.
        """
        message = images_wire.image_request(self.spec.name, request)
        async with contextlib.aclosing(self._streamed("GenerateImage", message)) as answers:
            async for answer in answers:
                yield images_wire.image_event(answer)

    async def voices(self) -> tuple[Voice, ...]:
        """:meth:`engines.capabilities.SpeechSynthesizer.voices`, in the backend."""
        answer = await self._unary("ListVoices", speech_pb2.ListVoicesRequest(model=self.spec.name))
        return speech_wire.voices(answer)

    def backend_process(self) -> BackendProcessInfo | None:
        """Its process for ``ps``, GetModel and metrics; None before it started or once it ended."""
        process = self.process
        if process is None or process.exited:
            return None
        return BackendProcessInfo(process.pid, process.started_at, self._rss_bytes)
