"""Starting the contenders' processes: our server, the peers' servers and the in-process workers.

Every server binds to 127.0.0.1 on a free port and is stopped with SIGTERM.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.procs import (
    LOOPBACK,
    ManagedProcess,
    ProcessFailedError,
    base_env,
    bind_failed,
    free_port,
    grpc_serving,
    http_ok,
)
from bench.workloads import CHAT_MODEL, EMBED_MODEL, gguf_path, minilm_dir

SERVER_START_TIMEOUT_S = 180.0
#: Starts of our server tried with fresh ports when the picked ones were taken before the bind.
PORT_ATTEMPTS = 3


@dataclass
class Server:
    """A running server process and where to reach it.

    Attributes:
        name: Label (also the log file's name).
        process: The child process.
        grpc_target: ``host:port`` of its gRPC port, if it has one.
        http_base: Base URL of its HTTP port, if it has one.
        ready_s: Seconds from spawn to ready.
        metrics_port: Port of its ``/metrics`` (127.0.0.1), when it was started with one.

    """

    name: str
    process: ManagedProcess
    grpc_target: str | None = None
    http_base: str | None = None
    ready_s: float = 0.0
    info: dict[str, object] = field(default_factory=dict)
    metrics_port: int | None = None

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it does not exit."""
        self.process.stop()


def our_server_argv() -> list[str]:
    """``universal-runtime`` next to this interpreter (the project's console script)."""
    script = Path(sys.executable).parent / "universal-runtime"
    return [str(script)] if script.exists() else [sys.executable, "-m", "service.cli"]


def _start(server: Server, probes: list[Callable[[], bool]]) -> Server:
    """Wait until every probe of ``server`` passes (``ready_s``: time to the first); stop it on failure."""
    try:
        server.ready_s = server.process.wait_ready(probes[0], SERVER_START_TIMEOUT_S)
        for probe in probes[1:]:
            server.process.wait_ready(probe, SERVER_START_TIMEOUT_S)
    except Exception:
        server.process.stop()
        raise
    return server


def start_ours(
    log_dir: Path,
    name: str = "ours",
    env: dict[str, str] | None = None,
    cpus: str | None = None,
    *,
    metrics: bool = False,
    tree: Path | None = None,
) -> Server:
    """Start ``universal-runtime`` (gRPC + gateway) with the embedded default catalog.

    ``tree`` runs the server of another source tree (a commit extracted with ``git archive``):
    its packages first on ``PYTHONPATH``, ahead of this project's editable install.
    ``env`` adds ``UR_*`` settings; ``cpus`` (``"0"``, ``"0-1"``) pins it to those cores with
    ``taskset``, as a replica on a machine of its own would be; ``metrics`` serves ``/metrics`` on
    a port of its own (``Server.metrics_port``, picked with the others, so that a port taken
    between the check and the bind is replaced like them). Ready when gRPC health is SERVING and
    the gateway's ``/health`` answers.

    Raises:
        ProcessFailedError: it exited or did not become ready.

    """
    for attempt in range(PORT_ATTEMPTS):
        grpc_port, gateway_port = free_port(), free_port()
        metrics_port = free_port() if metrics else None
        data_dir = tempfile.mkdtemp(prefix="ur-bench-")
        command = our_server_argv() if tree is None else [sys.executable, "-m", "service.cli"]
        argv = [*command, "--grpc-port", str(grpc_port), "--gateway-port", str(gateway_port)]
        if cpus is not None:
            argv = ["taskset", "-c", cpus, *argv]
        # No metrics port unless asked for: several of our servers may run at once (metrics
        # still record).
        settings = {"UR_DATA_DIR": data_dir, "UR_LOG_LEVEL": "WARNING", "UR_GRPC_HOST": LOOPBACK}
        settings["UR_METRICS_PORT"] = str(metrics_port or 0)
        settings.update({"UR_GATEWAY_HOST": LOOPBACK, **(env or {})})
        if tree is not None:
            paths = (str(tree), str(tree / "generated"), os.environ.get("PYTHONPATH", ""))
            settings["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        process = ManagedProcess(name, argv, log_dir, base_env(**settings))
        target, base = f"{LOOPBACK}:{grpc_port}", f"http://{LOOPBACK}:{gateway_port}"
        server = Server(name, process, target, base, metrics_port=metrics_port)
        try:
            probes = [functools.partial(grpc_serving, target), functools.partial(http_ok, f"{base}/health")]
            return _start(server, probes)
        except ProcessFailedError as exc:
            # A free port can be taken by another process between the check and the bind
            # (several bench runs start servers at once): try other ports, a bounded number of times.
            if not bind_failed(str(exc)) or attempt == PORT_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


def served_catalog() -> dict[str, Any]:
    """The catalog our server reads: ``UR_CATALOG_PATH``'s file when set, else the embedded default."""
    from importlib import resources

    import yaml

    source = os.environ.get("UR_CATALOG_PATH")
    text = (
        Path(source).read_text()
        if source
        else resources.files("service").joinpath("default_catalog.yaml").read_text(encoding="utf-8")
    )
    return yaml.safe_load(text)


def served_option(model: str, option: str, default: Any = None) -> Any:
    """Catalog option ``option`` of ``model`` as our server is started with it (``default`` when unset).

    Raises:
        KeyError: the catalog has no ``model``.

    """
    return (served_catalog()["models"][model].get("options") or {}).get(option, default)


def catalog_with_options(path: Path, model: str, options: dict[str, str]) -> Path:
    """Write to ``path`` the catalog our server reads, with ``options`` set on ``model``'s entry.

    The copy is what a server started with ``UR_CATALOG_PATH=path`` serves (e.g. the embedding
    model on another ``runtime``), every other entry as it was (see :func:`served_catalog`).
    Returns ``path``.

    Raises:
        KeyError: the catalog has no ``model``.

    """
    import yaml

    catalog = served_catalog()
    entry = catalog["models"][model]
    entry["options"] = {**(entry.get("options") or {}), **options}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(catalog, sort_keys=False))
    return path


def start_gateway(
    log_dir: Path, grpc_target: str, name: str = "gateway", env: dict[str, str] | None = None
) -> Server:
    """Start a standalone ``universal-runtime-gateway`` in front of ``grpc_target``.

    ``env`` adds ``UR_GATEWAY_*`` settings. Ready when its ``/health`` answers.
    """
    port = free_port()
    script = Path(sys.executable).parent / "universal-runtime-gateway"
    argv = [str(script)] if script.exists() else [sys.executable, "-m", "gateway.cli"]
    argv += ["--grpc-target", grpc_target, "--host", LOOPBACK, "--port", str(port)]
    base = f"http://{LOOPBACK}:{port}"
    process = ManagedProcess(
        name, argv, log_dir, base_env(**{"UR_GATEWAY_LOG_LEVEL": "warning", **(env or {})})
    )
    return _start(Server(name, process, http_base=base), [lambda: http_ok(f"{base}/health")])


def start_llama_server(python: Path, log_dir: Path) -> Server:
    """Start ``llama_cpp.server`` with the same GGUF, context and threads as our catalog entry.

    ``--interrupt_requests False``: otherwise a new request cuts a running stream short.
    Ready when ``GET /v1/models`` answers.
    """
    port = free_port()
    threads = str(os.cpu_count() or 1)
    argv = [str(python), "-m", "llama_cpp.server", "--model", str(gguf_path()), "--model_alias", CHAT_MODEL]
    argv += ["--host", LOOPBACK, "--port", str(port), "--n_ctx", "2048", "--n_threads", threads]
    argv += ["--n_threads_batch", threads, "--interrupt_requests", "False", "--verbose", "False"]
    base = f"http://{LOOPBACK}:{port}"
    server = Server("llama-cpp-server", ManagedProcess("llama-cpp-server", argv, log_dir), http_base=base)
    return _start(server, [lambda: http_ok(f"{base}/v1/models")])


def start_infinity(python: Path, log_dir: Path) -> Server:
    """Start ``infinity_emb v2`` on the same local MiniLM directory, torch engine on CPU.

    Ready when ``GET /health`` answers; its embeddings endpoint is ``POST /embeddings``.
    """
    port = free_port()
    argv = [str(python.parent / "infinity_emb"), "v2", "--model-id", str(minilm_dir())]
    argv += ["--served-model-name", EMBED_MODEL, "--host", LOOPBACK, "--port", str(port)]
    argv += ["--engine", "torch", "--device", "cpu"]
    base = f"http://{LOOPBACK}:{port}"
    server = Server("infinity", ManagedProcess("infinity", argv, log_dir), http_base=base)
    return _start(server, [lambda: http_ok(f"{base}/health")])


def start_echo(log_dir: Path, reply_bytes: int) -> Server:
    """Start :mod:`bench.echo_server` answering ``reply_bytes`` bytes; ready when its health is SERVING."""
    port = free_port()
    argv = [sys.executable, "-m", "bench.echo_server", "--port", str(port), "--reply-bytes", str(reply_bytes)]
    target = f"{LOOPBACK}:{port}"
    server = Server("echo", ManagedProcess("echo", argv, log_dir), grpc_target=target)
    return _start(server, [lambda: grpc_serving(target)])


def start_worker(kind: str, log_dir: Path, args: tuple[str, ...] = ()) -> Server:
    """Start an in-process worker (``llama``, ``llama-batched``, ``st``, ``ocr``, ``anomaly``, with ``args``).

    See :mod:`bench.inprocess`.

    Raises:
        ProcessFailedError: it crashed while loading its model.

    """
    name = "-".join(["inprocess", kind, *(Path(arg).stem for arg in args)])  # one log file each
    argv = [sys.executable, "-m", "bench.inprocess", kind, *args]
    process = ManagedProcess(name, argv, log_dir, pipes=True)
    assert process.proc.stdout is not None
    line = process.proc.stdout.readline()
    if not line:
        process.stop()
        raise ProcessFailedError(f"{name} exited while loading:\n{process.log_tail()}")
    ready = json.loads(line)
    return Server(name, process, ready_s=float(ready.get("load_s", 0.0)), info=ready)


def list_models(target: str) -> list[dict[str, object]]:
    """Our catalog via ``ModelService/ListModels``: name, backend, tasks (enum names), status."""
    import grpc
    from universal_runtime.v1 import model_service_pb2, model_service_pb2_grpc

    with grpc.insecure_channel(target) as channel:
        response = model_service_pb2_grpc.ModelServiceStub(channel).ListModels(
            model_service_pb2.ListModelsRequest(), timeout=30
        )
    return [
        {
            "name": m.name,
            "backend": m.backend,
            "tasks": [model_service_pb2.Task.Name(t) for t in m.tasks],
            "status": model_service_pb2.ModelStatus.Name(m.status),
        }
        for m in response.models
    ]


def load_model(target: str, name: str, *, unload: bool = False) -> dict[str, int]:
    """``LoadModel`` (keep-alive ``-1``: stays until unloaded) or ``UnloadModel``; return its memory.

    Returns ``{"ram_bytes", "vram_bytes"}`` as the server reports them for the model.
    """
    import grpc
    from universal_runtime.v1 import model_service_pb2, model_service_pb2_grpc

    with grpc.insecure_channel(target) as channel:
        stub = model_service_pb2_grpc.ModelServiceStub(channel)
        if unload:
            response = stub.UnloadModel(model_service_pb2.UnloadModelRequest(name=name), timeout=120)
        else:
            response = stub.LoadModel(
                model_service_pb2.LoadModelRequest(name=name, keep_alive="-1"), timeout=300
            )
    memory = response.model.memory
    return {"ram_bytes": int(memory.ram_bytes), "vram_bytes": int(memory.vram_bytes)}
