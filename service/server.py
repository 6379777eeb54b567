"""Builds, runs and gracefully stops the grpc.aio server."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2
from universal_runtime.v1 import (
    batch_pb2,
    batch_pb2_grpc,
    inference_service_pb2,
    inference_service_pb2_grpc,
    model_service_pb2,
    model_service_pb2_grpc,
    response_store_pb2,
    response_store_pb2_grpc,
)

from engines.anomaly.store import DetectorStore
from engines.classification.custom import ClassifierStore
from engines.executor import ExecutorPool
from engines.metrics import set_enabled as set_metrics_enabled
from engines.ocr.pdf_worker import PRELOAD as PDF_WORKER_PRELOAD
from engines.owners import OwnedStores
from engines.process_lane import preload_modules
from engines.registry import import_engine_modules
from engines.state_store import StateStore, open_state_store
from engines.storage import StorageLimits
from service import metrics
from service.batches.api import BatchApi
from service.batches.lines import InputLimits
from service.batches.runner import BatchRunner
from service.batches.store import BatchApiStore, StoreLimits
from service.catalog import load_catalog, user_catalog_path
from service.core.admission.authentication import Authentication
from service.core.admission.concurrency import ConcurrencyLimit
from service.core.admission.error_mapping import ErrorMapping
from service.core.admission.priority import PriorityClass
from service.core.admission.quota import Quota
from service.core.admission.request_log import RequestLog
from service.core.admission.tracing import Tracing
from service.core.chain import AdmissionChain, AdmissionStep, build_chain
from service.core.data_plane import DataPlane
from service.faces.grpc_server import GrpcFace
from service.faces.in_process import InProcessFace
from service.faces.request_limits import RequestLimits
from service.metrics_server import start_metrics_server
from service.model_manager import ModelManager
from service.quotas import Quotas
from service.responses import ResponseLimits, ResponseStore
from service.servicers.batches import BatchServicer
from service.servicers.inference import InferenceServicer
from service.servicers.models import ModelServicer
from service.servicers.response_store import ResponseStoreServicer
from service.settings import Settings
from service.shared.api_keys import ApiKeys, load_api_keys
from service.tasks.anomaly import AnomalyTask
from service.tasks.classifiers import ClassifierTask
from service.tasks.document_questions import DocumentQuestionTask
from service.tasks.documents import DocumentTask
from service.tasks.encoders import EncoderTask
from service.tasks.generation import GenerationTask
from service.tasks.images import ImageTask
from service.tasks.ocr import OcrTask
from service.tasks.response_create import ResponseCreateTask
from service.tasks.response_store import ResponseStoreTask
from service.tasks.speech import SpeechTask
from service.tasks.tokenization import TokenizationTask
from service.tls import InternalSocket, add_port, server_tls_files
from service.tracing import configure_tracing

log = logging.getLogger(__name__)

# Folders of the state store (settings.state_url, or else settings.data_dir) where fitted state is saved.
CLASSIFIERS_DIR = "classifiers"
ANOMALY_DIR = "anomaly"
RESPONSES_DIR = "responses"
BATCHES_DIR = "batches"

SERVICE_NAMES = (
    inference_service_pb2.DESCRIPTOR.services_by_name["InferenceService"].full_name,
    model_service_pb2.DESCRIPTOR.services_by_name["ModelService"].full_name,
    response_store_pb2.DESCRIPTOR.services_by_name["ResponseStoreService"].full_name,
    batch_pb2.DESCRIPTOR.services_by_name["BatchService"].full_name,
)
INFERENCE_SERVICE = SERVICE_NAMES[0]
#: RPCs whose requests are texts, held to ``max_text_request_bytes`` (:mod:`service.faces.request_limits`).
TEXT_METHODS = tuple(
    f"/{SERVICE_NAMES[0]}/{name}"
    for name in (
        "Generate",
        "GenerateStream",
        "Embed",
        "Classify",
        "ExtractEntities",
        "Rerank",
        "FitClassifier",
        "Tokenize",
        "Detokenize",
        "SynthesizeSpeech",
        "ListVoices",
        "GenerateImage",
    )
) + tuple(f"/{SERVICE_NAMES[2]}/{name}" for name in ("CreateResponse", "CreateResponseStream"))


@dataclass
class RunningServer:
    """A started server and what it owns; :meth:`stop` shuts it all down in order."""

    server: grpc.aio.Server
    port: int
    manager: ModelManager
    health: health.aio.HealthServicer
    executors: ExecutorPool
    settings: Settings
    metrics_server: WSGIServer | None = None
    #: Plaintext socket of the in-process gateway when TLS is on (``start_server(internal_socket=True)``).
    internal_socket: InternalSocket | None = None
    #: Core calls for a gateway and the batch runner in this process (:mod:`service.faces.in_process`).
    in_process: InProcessFace | None = None
    #: The Batch API's runner: it runs batches once ``batches.start(execute)`` gave it an executor.
    batches: BatchRunner | None = None

    @property
    def metrics_port(self) -> int | None:
        """Port of the server's own ``/metrics`` (None when ``metrics_port`` is 0)."""
        return None if self.metrics_server is None else int(self.metrics_server.server_port)

    async def stop(self, grace: float | None = None) -> None:
        """Shut down gracefully.

        Health turns NOT_SERVING, new RPCs are refused, in-flight ones get ``grace`` seconds,
        then models unload and the executors stop.
        """
        grace = self.settings.shutdown_grace_s if grace is None else grace
        log.info("shutting down", extra={"grace_s": grace})
        await self.health.enter_graceful_shutdown()
        if self.batches is not None:  # no new lines; those in flight run again after a restart
            await self.batches.stop()
        if self.in_process is None:
            await self.server.stop(grace)
        else:  # in-process calls in flight get the same grace as the server's own
            await asyncio.gather(self.server.stop(grace), self.in_process.close(grace))
        await self.manager.close()
        self.executors.shutdown(wait=True)
        metrics.unregister_model_state(self.manager)
        if self.metrics_server is not None:
            self.metrics_server.shutdown()
            self.metrics_server.server_close()
        if self.internal_socket is not None:
            self.internal_socket.remove()
        log.info("stopped")


async def _preload_then_serve(
    manager: ModelManager, names: list[str], health_servicer: health.aio.HealthServicer
) -> None:
    """Load the preloads in order, then report InferenceService SERVING.

    Failed preloads are logged and left ``Error``; the server serves the rest all the same. Once a
    graceful shutdown has begun the health servicer ignores the change.
    """
    started = time.perf_counter()
    await manager.preload(names)
    log.info("preloads ended", extra={"models": names, "seconds": round(time.perf_counter() - started, 3)})
    await health_servicer.set(INFERENCE_SERVICE, health_pb2.HealthCheckResponse.SERVING)


# Clients may ping this often while calls are open (gRPC's default: 5 minutes, and a client that
# pings more often is sent GOAWAY). The gateway pings every 30 s to find a replica that vanished
# without closing its connection (a node lost), which a SIGKILLed process would have closed.
MIN_CLIENT_PING_INTERVAL_MS = 10_000


def connection_options(max_connection_age_s: float) -> list[tuple[str, int]]:
    """Server options of gRPC core for connection lifetime and client keepalive pings.

    Args:
        max_connection_age_s: Seconds before a connection is sent GOAWAY (gRPC adds ±10% jitter);
            its calls finish (no grace limit), new ones reconnect. 0 leaves connections open.

    Returns:
        ``(name, value)`` pairs for ``grpc.aio.server(options=...)`` (names from gRPC core's
        ``grpc_types.h``).

    """
    options = [("grpc.http2.min_recv_ping_interval_without_data_ms", MIN_CLIENT_PING_INTERVAL_MS)]
    if max_connection_age_s > 0:
        options.append(("grpc.max_connection_age_ms", int(max_connection_age_s * 1000)))
    return options


def state_store(settings: Settings) -> StateStore:
    """The state store of fitted state and stored responses; nothing is contacted yet.

    It is ``settings.state_url`` (shared by replicas), or else ``settings.data_dir``.

    Raises:
        ValueError: ``state_url`` names an fsspec protocol whose package is not installed.

    """
    return open_state_store(
        settings.state_url or settings.data_dir,
        settings.state_storage_options,
        timeout_s=settings.state_timeout_s,
    )


def response_store_servicer(
    settings: Settings, manager: ModelManager, executors: ExecutorPool
) -> ResponseStoreServicer:
    """The ResponseStoreService over the state store's ``responses/`` folder.

    The Responses API's stored responses, within the ``responses_*`` settings, on two CPU lanes of
    their own (puts, and reads with deletes), and their creation (chain, generation, store) through
    a GenerationTask over ``manager``, as Generate's.
    """
    store = ResponseStore(
        state_store(settings).child(RESPONSES_DIR),
        ResponseLimits(
            max_count=settings.responses_max_count,
            max_bytes=settings.responses_max_bytes,
            max_total_bytes=settings.responses_max_total_bytes,
            ttl_s=settings.responses_ttl_s,
        ),
    )
    task = ResponseStoreTask(
        store, executors.lane("cpu", "task:responses-put"), executors.lane("cpu", "task:responses-read")
    )
    return ResponseStoreServicer(
        task, create=ResponseCreateTask(task, GenerationTask(manager)), settings=settings
    )


def batch_api(settings: Settings, executors: ExecutorPool) -> BatchApi:
    """The Batch API's files and batches in the state store's ``batches/`` folder, and their runner.

    The runner is not started: the composition root starts it with the executor of lines
    (:meth:`BatchRunner.start`).
    """
    store = BatchApiStore(
        state_store(settings).child(BATCHES_DIR),
        StoreLimits(
            InputLimits(
                settings.batch_file_max_bytes, settings.batch_file_max_lines, settings.batch_line_max_bytes
            ),
            max_files=settings.batch_max_files,
            max_batches=settings.batch_max_batches,
        ),
    )
    runner = BatchRunner(
        store,
        executors.lane("cpu", "task:batches-run"),
        line_concurrency=settings.batch_line_concurrency,
        max_running=settings.batch_max_running,
        lease_s=settings.batch_lease_s,
        scan_interval_s=settings.batch_scan_interval_s,
    )
    return BatchApi(
        store, executors.lane("cpu", "task:batches-write"), executors.lane("cpu", "task:batches-read"), runner
    )


def inference_servicer(
    settings: Settings, manager: ModelManager, executors: ExecutorPool
) -> InferenceServicer:
    """The InferenceService and its tasks, each given its collaborators (the one place they are wired).

    Custom classifiers and anomaly detectors are saved in the state store (``settings.state_url``,
    shared by replicas, or else ``settings.data_dir``), shared or per API key
    (:class:`engines.owners.OwnedStores`), each folder within its quota settings; the
    scikit-learn work of each runs on a CPU lane of its own, beside
    the models' lanes (:mod:`engines.executor`), and anomaly fits in a process lane
    (:mod:`engines.process_lane`).
    """
    # Before any lane child starts the forkserver (an anomaly fit may come before any OCR model
    # loads): PDF children restarted after a kill then import nothing before their first page.
    preload_modules(*PDF_WORKER_PRELOAD)
    state = state_store(settings)
    # The shared namespace at anomaly/ and classifiers/ (where older versions kept everything),
    # each key's under owners/<hash of its name>/; every folder within its own quota.
    detectors = OwnedStores(
        state,
        ANOMALY_DIR,
        lambda folder: DetectorStore(
            folder,
            keep_versions=settings.anomaly_keep_versions,
            limits=StorageLimits(settings.anomaly_store_max_items, settings.anomaly_store_max_bytes),
            cache_ttl_s=settings.state_cache_ttl_s,
        ),
    )
    classifiers = OwnedStores(
        state,
        CLASSIFIERS_DIR,
        lambda folder: ClassifierStore(
            folder,
            limits=StorageLimits(settings.classifier_store_max_items, settings.classifier_store_max_bytes),
            cache_ttl_s=settings.state_cache_ttl_s,
        ),
    )
    generation = GenerationTask(manager)
    encoders = EncoderTask(manager)
    classifier_task = ClassifierTask(manager, classifiers, executors.lane("cpu", "task:classifiers"))
    documents = DocumentTask(manager)
    return InferenceServicer(
        settings,
        generation=generation,
        encoders=encoders,
        classifiers=classifier_task,
        ocr=OcrTask(manager),
        speech=SpeechTask(manager),
        images=ImageTask(manager),
        documents=documents,
        document_questions=DocumentQuestionTask(manager, documents, encoders, generation, classifier_task),
        anomaly=AnomalyTask(
            detectors,
            executors.lane("cpu", "task:anomaly"),
            executors.process_lane("task:anomaly-fit", preload=("engines.anomaly.store",)),
            max_window=settings.anomaly_max_window,
            fit_timeout_s=settings.anomaly_fit_timeout_s,
        ),
        tokenization=TokenizationTask(manager),
    )


#: Server reflection's stable service, beside ``grpc.reflection.v1alpha.ServerReflection``.
REFLECTION_V1_SERVICE = "grpc.reflection.v1.ServerReflection"
_REFLECTION_V1_FILE = "grpc/reflection/v1/reflection.proto"


def _add_reflection_v1_descriptor() -> None:
    """Add ``grpc/reflection/v1/reflection.proto`` to the default pool (once), built from v1alpha's.

    grpcio-reflection ships only v1alpha; v1 is the same file under package ``grpc.reflection.v1``
    (gRPC's ``src/proto/grpc/reflection/v1/reflection.proto``: same messages, fields and numbers),
    so the messages are wire-identical and one servicer answers both. The descriptor lets a
    client resolve the v1 service by reflection too.
    """
    pool = descriptor_pool.Default()
    try:
        pool.FindFileByName(_REFLECTION_V1_FILE)
        return
    except KeyError:
        pass
    proto = descriptor_pb2.FileDescriptorProto()
    reflection_pb2.DESCRIPTOR.CopyToProto(proto)
    old, new = f".{proto.package}.", ".grpc.reflection.v1."
    proto.name, proto.package = _REFLECTION_V1_FILE, "grpc.reflection.v1"
    proto.ClearField("options")
    for message in proto.message_type:
        for field in message.field:
            if field.HasField("type_name"):  # message and enum fields only
                field.type_name = field.type_name.replace(old, new, 1)
    for service in proto.service:
        for method in service.method:
            method.input_type = method.input_type.replace(old, new, 1)
            method.output_type = method.output_type.replace(old, new, 1)
    pool.AddSerializedFile(proto.SerializeToString())


def enable_reflection(service_names: tuple[str, ...], server: grpc.aio.Server | GrpcFace) -> None:
    """Serve gRPC server reflection as ``grpc.reflection.v1`` and ``v1alpha`` (one servicer).

    Newer grpcurl and other tools ask v1 first and fall back to v1alpha; older ones ask only
    v1alpha. ``service_names`` are listed with both reflection services added.
    """
    _add_reflection_v1_descriptor()
    servicer = reflection.aio.ReflectionServicer(
        (*service_names, reflection.SERVICE_NAME, REFLECTION_V1_SERVICE)
    )
    handler = grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
        response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
    )
    for name in (reflection.SERVICE_NAME, REFLECTION_V1_SERVICE):
        server.add_registered_method_handlers(name, {"ServerReflectionInfo": handler})


def admission_chain(settings: Settings, api_keys: ApiKeys, quotas: Quotas) -> AdmissionChain:
    """The server's admission chain (:mod:`service.core.chain`), its steps from the settings.

    Request log and tracing always; the concurrency limit with ``max_concurrent_requests``; the
    key check with keys (``auth_public_health`` leaves health open); the priority class always;
    quotas when a key has one; the error mapping innermost.

    Raises:
        service.core.chain.ChainOrderError: never for these steps (their order is checked).

    """
    steps: list[AdmissionStep] = [RequestLog(), Tracing()]
    if settings.max_concurrent_requests:
        steps.append(ConcurrencyLimit(settings.max_concurrent_requests))
    if api_keys:
        steps.append(Authentication(api_keys, public_health=settings.auth_public_health))
    steps.append(PriorityClass())
    if quotas:
        steps.append(Quota(quotas))
    steps.append(ErrorMapping())
    return build_chain(steps)


async def start_server(settings: Settings, *, internal_socket: bool = False) -> RunningServer:
    """Create and start the server on ``settings.grpc_host:grpc_port`` (port 0 picks a free one).

    With ``tls_cert_file`` and ``tls_key_file`` the port speaks TLS (mutual TLS with
    ``tls_client_ca_file``), reloading the certificate when the files change (:mod:`service.tls`).
    ``internal_socket`` (with TLS on) also binds a plaintext Unix socket only this user can open,
    for a gateway in this process (:class:`service.tls.InternalSocket`).

    Every catalog entry is checked first (:meth:`ModelManager.check_catalog`): one that cannot
    work (unknown backend, missing source, bad option) is logged and reported as ``Error: ...``.

    Raises:
        service.shared.api_keys.ApiKeyError: the keys file (``api_keys_file``) is unreadable or malformed.
        service.shared.tls.TlsConfigError: a TLS setting is half set, or names an unreadable or wrong file
            (a ValueError naming the setting); raised before anything starts.
        service.catalog.CatalogError: the catalog file is unreadable or not a catalog (a malformed
            entry is only marked ``Error``).
        RuntimeError: the gRPC or the metrics port could not be bound.
        ValueError: ``state_url`` names an fsspec protocol whose package is not installed.

    """
    api_keys = load_api_keys(settings.api_key_value(), settings.api_keys_file)
    tls_files = server_tls_files(settings)
    executors = ExecutorPool()
    import_engine_modules(settings.engine_modules)
    catalog = load_catalog(settings.catalog_path, user_path=user_catalog_path(settings.data_dir))
    manager = ModelManager(catalog.specs, settings, executors, invalid=catalog.invalid)
    set_metrics_enabled(settings.metrics_enabled)
    # Bad entries are logged and marked ERROR; the server still serves the others.
    manager.check_catalog()
    preloads = manager.preload_names()  # an unknown name in UR_PRELOAD stops start-up here
    # Before the server is made: the grpc instrumentation patches grpc.aio.server.
    configure_tracing(settings.otlp_endpoint)
    quotas = Quotas(api_keys)  # per process: one state per key with a quota in the keys file
    plane = DataPlane(admission_chain(settings, api_keys, quotas))
    limits = RequestLimits(
        max_receive_bytes=settings.max_receive_message_bytes,
        # The gateway beside the server receives at most max_receive_message_bytes over its
        # channel (service.cli.gateway_app): in-process answers keep that bound too.
        max_send_bytes=min(settings.max_send_message_bytes, settings.max_receive_message_bytes),
        by_method=dict.fromkeys(TEXT_METHODS, settings.max_text_request_bytes),
    )
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", settings.max_receive_message_bytes),
            ("grpc.max_send_message_length", settings.max_send_message_bytes),
            *connection_options(settings.grpc_max_connection_age_s),
        ],
    )
    in_process = InProcessFace(plane, limits)
    inference_service_pb2_grpc.add_InferenceServiceServicer_to_server(
        inference_servicer(settings, manager, executors), plane
    )
    model_service_pb2_grpc.add_ModelServiceServicer_to_server(ModelServicer(manager), plane)
    response_store_pb2_grpc.add_ResponseStoreServiceServicer_to_server(
        response_store_servicer(settings, manager, executors), plane
    )
    batches = batch_api(settings, executors)
    batch_pb2_grpc.add_BatchServiceServicer_to_server(
        BatchServicer(batches, settings.batch_max_file_transfers), plane
    )
    face = GrpcFace(plane, limits)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, face)
    enable_reflection((*SERVICE_NAMES, health.SERVICE_NAME), face)
    face.attach(server)
    address = f"{settings.grpc_host}:{settings.grpc_port}"
    port = add_port(server, address, tls_files, settings.tls_refresh_interval_s)
    if port == 0:
        raise RuntimeError(f"could not bind {address}")
    internal = InternalSocket() if internal_socket and tls_files is not None else None
    if internal is not None:
        internal.bind(server)
    metrics_server = None
    metrics.count_by_key_name(settings.metrics_key_names)
    if settings.metrics_port:
        try:
            # The gRPC port's TLS and keys; metrics_public drops the keys and client certificates.
            metrics_tls = tls_files
            if settings.metrics_public and tls_files is not None:
                metrics_tls = dataclasses.replace(tls_files, ca_file=None)
            metrics_server = start_metrics_server(
                settings.grpc_host,
                settings.metrics_port,
                tls=metrics_tls,
                api_keys=None if settings.metrics_public else api_keys,
                tls_refresh_interval_s=settings.tls_refresh_interval_s,
            )
        except OSError as exc:
            raise RuntimeError(
                f"could not bind the metrics port {settings.grpc_host}:{settings.metrics_port} ({exc}); "
                "set UR_METRICS_PORT to a free port, or 0 to turn it off"
            ) from exc
    await server.start()
    manager.start()
    # With preloads, InferenceService stays NOT_SERVING until they end (Kubernetes readiness waits
    # for them); the server ("", which liveness and start-up probes ask) and ModelService answer at
    # once, so a long preload never restarts the pod and its progress can be watched.
    waiting = (INFERENCE_SERVICE,) if preloads else ()
    for name in ("", *SERVICE_NAMES):
        status = (
            health_pb2.HealthCheckResponse.NOT_SERVING
            if name in waiting
            else health_pb2.HealthCheckResponse.SERVING
        )
        await health_servicer.set(name, status)
    if preloads:
        manager.spawn(_preload_then_serve(manager, preloads, health_servicer))
    log.info(
        "grpc server listening", extra={"address": f"{settings.grpc_host}:{port}", "tls": bool(tls_files)}
    )
    running = RunningServer(
        server,
        port,
        manager,
        health_servicer,
        executors,
        settings,
        metrics_server,
        internal,
        in_process,
        batches=batches.runner,
    )
    metrics.register_model_state(manager)  # once started: a failed start leaves nothing registered
    if metrics_server is not None:
        log.info("metrics listening", extra={"address": f"{settings.grpc_host}:{running.metrics_port}"})
    return running
