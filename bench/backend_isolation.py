"""Backend isolation: the chat model's backend process killed mid-stream while other clients embed.

Goal (the backend-process issue): SIGKILL and SIGSEGV the chat model's backend during 8 streams
while 64 clients embed: the embeds see 0 errors and a p99 within 1.5x of the same run without the
kill; the streams end within 1 s of the kill with ``UNAVAILABLE``, reason ``BACKEND_EXITED``; chat
serves again within the model's load time + 2 s.

Method: one server of ours (``universal-runtime``, gRPC + gateway, the default catalog, backend
processes on, ``/metrics`` on a port of its own), the embedder and the chat model loaded before
anything is timed. One scenario, three runs per repetition, interleaved (the first rotates):

- ``no kill`` (the reference): the load below, nothing killed;
- ``SIGKILL`` and ``SIGSEGV``: the same load, and the chat backend's pid (``GetModel``'s
  ``Model.backend_process.pid``) sent that signal (``os.kill``: an external signal, which ends the
  process as a fault of its own would) once every stream has its first token plus 1 s.

Each run first unloads the chat model and loads it again with ``LoadModel`` (timed: ``load_s``,
the model's load time, backend start included, measured on the idle server in that run), so
every run starts from a fresh backend. Then ``python -m bench.load_client --mode grpc-embed``
runs 64 single-sentence ``Embed`` clients for a fixed time; once its first call is done (its
connection to the server is up), the bench process starts 8 ``GenerateStream`` calls of long
answers (SmolLM2's end tokens 0, 1 and 2 get a logit bias of -100, so each stream runs to
``max_tokens``). After the kill, the bench records each stream's end (seconds after the kill)
and its error reason (the ``google.rpc.Status`` in the trailing metadata
``grpc-status-details-bin``, its ``ErrorInfo`` reason), and polls a ``Generate`` of 1 token
(50 ms between failures) until one succeeds: ``recovery_s`` is the kill to that success.
``restart_load_s`` is the restart's own load (the rise of ``ur_model_load_duration_seconds``'s
sum for the model); ``recovery_minus_load_s`` subtracts the run's idle ``load_s`` (the goal's
figure), ``recovery_minus_restart_load_s`` the restart's load under the embed load. In the
``no kill`` run the streams are cancelled once the embed clients end.

The server waits before restarting a backend that exited recently (0.25 s after one exit in the
last minute, doubling per exit: ``service/model_manager/managed.py``). So that every kill meets
the first step of that backoff, full and quick runs wait until a minute has passed since the
previous kill before the next (tiny runs do not; ``--kill-spacing-s`` sets the gap;
``restart_backoff_s`` records the backoff each kill met).

Usage: ``python -m bench.backend_isolation [--quick|--tiny] [--reps N] [--out DIR] [--kill-spacing-s S]``.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from bench import servers
from bench.procs import REPO_ROOT, base_env, status_name
from bench.runner import Contender, Report, parse_config, run_load_client
from bench.stats import percentile
from bench.workloads import CHAT_MODEL, EMBED_MODEL, chat_messages

# The server's restart backoff (exits remembered for a minute), to space the kills and record it.
from service.model_manager.managed import RESTART_WINDOW_S, restart_delay_s

HEADLINE = [
    {"key": "embed_p99_ms", "label": "embed p99 ms", "higher_is_better": False},
    {"key": "embed_p50_ms", "label": "embed p50 ms", "higher_is_better": False},
    {"key": "embed_errors", "label": "embed errors", "higher_is_better": False},
    {"key": "stream_end_max_s", "label": "last stream end after the kill s", "higher_is_better": False},
    {"key": "streams_backend_exited", "label": "streams ended BACKEND_EXITED", "higher_is_better": True},
    {"key": "recovery_s", "label": "recovery s", "higher_is_better": False},
    {"key": "recovery_minus_load_s", "label": "recovery - load time s", "higher_is_better": False},
]
#: Contender name -> the signal sent to the chat backend (None: the reference, nothing killed).
KILLS: dict[str, signal.Signals | None] = {
    "no-kill": None,
    "sigkill": signal.SIGKILL,
    "sigsegv": signal.SIGSEGV,
}
LABELS = {
    "no-kill": "no kill (ref)",
    "sigkill": "SIGKILL the chat backend",
    "sigsegv": "SIGSEGV the chat backend",
}
#: SmolLM2's end tokens (<|endoftext|>, <|im_start|>, <|im_end|>), banned so streams run to max_tokens.
END_TOKENS = (0, 1, 2)
BACKEND_EXITED = "BACKEND_EXITED"
#: Deadline of each stream, of each recovery poll and of the whole recovery, seconds.
STREAM_TIMEOUT_S = 300.0
RECOVERY_TIMEOUT_S = 120.0
RECOVERY_POLL_S = 0.05
#: Bounded waits: the embed client's first connection, the streams' first tokens, their ends.
CLIENT_START_TIMEOUT_S = 60.0
FIRST_TOKEN_TIMEOUT_S = 120.0
STREAM_END_TIMEOUT_S = 60.0
#: The chat model's load-time histogram in /metrics (sum and count by model).
LOAD_METRIC = "ur_model_load_duration_seconds"


@dataclass
class Settings:
    """The sizes of one mode's runs."""

    embed_clients: int
    embed_duration_s: float
    streams: int
    max_tokens: int
    kill_after_s: float
    kill_spacing_s: float

    def as_dict(self) -> dict[str, Any]:
        """The settings recorded with the results."""
        return dict(self.__dict__)


@dataclass
class StreamResult:
    """One chat stream: tokens received, when it ended and how."""

    tokens: int = 0
    first_token: float | None = None
    ended: float | None = None
    code: str = "OK"
    reason: str = ""
    call: Any = None
    done: threading.Event = field(default_factory=threading.Event)


def error_reason(exc: BaseException) -> str:
    """The ``ErrorInfo`` reason of a failed gRPC call, or ``""`` (read as the server's proxy reads it)."""
    import grpc

    from service.model_manager.backends.errors import error_from_status

    return error_from_status(exc).reason if isinstance(exc, grpc.RpcError) else ""


def _parameters(max_tokens: int) -> Any:
    from universal_runtime.v1 import generation_pb2

    return generation_pb2.GenerationParameters(
        max_tokens=max_tokens,
        temperature=0.0,
        repetition_penalty=1.0,
        logit_bias=[generation_pb2.LogitBias(token_id=t, bias=-100.0) for t in END_TOKENS],
    )


def _messages(index: int, salt: str) -> list[Any]:
    from universal_runtime.v1 import generation_pb2

    roles = {"user": generation_pb2.CHAT_ROLE_USER, "system": generation_pb2.CHAT_ROLE_SYSTEM}
    return [
        generation_pb2.ChatMessage(role=roles[m["role"]], content=m["content"])
        for m in chat_messages(index, salt)
    ]


def _stream(stub: Any, index: int, salt: str, max_tokens: int, out: StreamResult) -> None:
    """Thread body: one ``GenerateStream`` read to its end; fills ``out``."""
    from universal_runtime.v1 import generation_pb2

    request = generation_pb2.GenerateStreamRequest(
        model=CHAT_MODEL, messages=_messages(index, salt), parameters=_parameters(max_tokens)
    )
    try:
        out.call = stub.GenerateStream(request, timeout=STREAM_TIMEOUT_S)
        for message in out.call:
            if out.first_token is None and (message.text or message.token_ids):
                out.first_token = time.monotonic()
            out.tokens += len(message.token_ids)
    except Exception as exc:
        out.code = status_name(exc) or type(exc).__name__
        out.reason = error_reason(exc)
    finally:
        out.ended = time.monotonic()
        out.done.set()


def backend_pid(target: str, model: str) -> int:
    """The pid of ``model``'s backend process (``GetModel``); 0 when it runs in the server's process."""
    import grpc
    from universal_runtime.v1 import model_service_pb2, model_service_pb2_grpc

    with grpc.insecure_channel(target) as channel:
        stub = model_service_pb2_grpc.ModelServiceStub(channel)
        response = stub.GetModel(model_service_pb2.GetModelRequest(name=model), timeout=30)
    return int(response.model.backend_process.pid)


def load_metric(metrics_port: int, model: str) -> tuple[float, float]:
    """``(sum, count)`` of ``ur_model_load_duration_seconds`` for ``model`` from ``/metrics``."""
    import httpx

    text = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).text
    values = {}
    for kind in ("sum", "count"):
        pattern = rf'^{LOAD_METRIC}_{kind}\{{[^}}]*model="{re.escape(model)}"[^}}]*\}} (\S+)$'
        match = re.search(pattern, text, re.M)
        values[kind] = float(match.group(1)) if match else 0.0
    return values["sum"], values["count"]


def recover(target: str, timeout_s: float = RECOVERY_TIMEOUT_S) -> tuple[float, int]:
    """Poll ``Generate`` of 1 token until one succeeds; ``(when, failed polls)`` (monotonic seconds).

    Raises:
        TimeoutError: none succeeded within ``timeout_s``.

    """
    import grpc
    from universal_runtime.v1 import generation_pb2, inference_service_pb2_grpc

    request = generation_pb2.GenerateRequest(
        model=CHAT_MODEL, messages=_messages(0, "recovery"), parameters=_parameters(1)
    )
    end = time.monotonic() + timeout_s
    failed = 0
    with grpc.insecure_channel(target) as channel:
        stub = inference_service_pb2_grpc.InferenceServiceStub(channel)
        while time.monotonic() < end:
            try:
                stub.Generate(request, timeout=max(0.1, end - time.monotonic()))
                return time.monotonic(), failed
            except grpc.RpcError:
                failed += 1
                time.sleep(RECOVERY_POLL_S)
    raise TimeoutError(f"chat did not serve again within {timeout_s:.0f}s of the kill")


def _connected(pid: int, port: int) -> bool:
    """Whether process ``pid`` has an established TCP connection to ``port`` on loopback."""
    import psutil

    with contextlib.suppress(psutil.Error):
        for conn in psutil.Process(pid).net_connections(kind="tcp"):
            if conn.raddr and conn.raddr.port == port and conn.status == psutil.CONN_ESTABLISHED:
                return True
    return False


def _wait_until(check: Any, timeout_s: float, what: str, interval_s: float = 0.02) -> None:
    """Poll ``check()`` until true; raise TimeoutError naming ``what`` after ``timeout_s``."""
    end = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > end:
            raise TimeoutError(f"{what} not within {timeout_s:.0f}s")
        time.sleep(interval_s)


class Runner:
    """Runs the three kinds of run against one server, remembering the kills (for the spacing)."""

    def __init__(self, report: Report, server: servers.Server, settings: Settings):
        self.report = report
        self.server = server
        self.settings = settings
        self.kills: list[float] = []
        self.runs = 0

    def contenders(self) -> list[Contender]:
        """One contender per entry of :data:`KILLS` (the reference first)."""
        return [
            Contender(name, LABELS[name], "reference" if sig is None else "ours", run=self._runner(sig))
            for name, sig in KILLS.items()
        ]

    def _runner(self, sig: signal.Signals | None) -> Any:
        return lambda params: self.run(sig)

    def _reload_chat(self) -> float:
        """Unload the chat model and load it again; the load's seconds (a fresh backend)."""
        target = self.server.grpc_target
        assert target is not None
        servers.load_model(target, CHAT_MODEL, unload=True)
        start = time.monotonic()
        servers.load_model(target, CHAT_MODEL)
        return time.monotonic() - start

    def run(self, sig: signal.Signals | None) -> dict[str, Any]:
        """One run: embeds and streams, the kill ``sig`` (None: none); the run's result dict."""
        import grpc
        from universal_runtime.v1 import inference_service_pb2_grpc

        s, target = self.settings, self.server.grpc_target
        assert target is not None and self.server.metrics_port is not None
        if sig is not None and self.kills and s.kill_spacing_s > 0:
            wait = self.kills[-1] + s.kill_spacing_s - time.monotonic()
            if wait > 0:
                self.report.progress(f"waiting {wait:.0f}s so the restart backoff forgets the last kill")
                time.sleep(wait)
        self.runs += 1
        salt = f"{self.report.started}/{self.runs}"
        load_s = self._reload_chat()
        pid = backend_pid(target, CHAT_MODEL)
        if pid <= 0:
            raise RuntimeError(f"{CHAT_MODEL} has no backend process (are backend processes off?)")
        port = int(target.rsplit(":", 1)[1])
        argv = [sys.executable, "-m", "bench.load_client", "--mode", "grpc-embed", "--target", target]
        argv += ["--model", EMBED_MODEL, "--concurrency", str(s.embed_clients), "--batch", "1"]
        argv += ["--requests", "1000000", "--duration-s", str(s.embed_duration_s), "--warmup", "1"]
        argv += ["--timeout-s", "60"]
        client = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT, env=base_env()
        )
        streams = [StreamResult() for _ in range(s.streams)]
        channel = grpc.insecure_channel(target)
        killed_at = recovered_at = None
        failed_polls = 0
        before = after = (0.0, 0.0)
        try:
            _wait_until(
                lambda: _connected(client.pid, port) or client.poll() is not None,
                CLIENT_START_TIMEOUT_S,
                "the embed client's connection",
            )
            stub = inference_service_pb2_grpc.InferenceServiceStub(channel)
            threads = [
                threading.Thread(target=_stream, args=(stub, i, salt, s.max_tokens, out), daemon=True)
                for i, out in enumerate(streams)
            ]
            for thread in threads:
                thread.start()
            _wait_until(
                lambda: all(o.first_token is not None or o.done.is_set() for o in streams),
                FIRST_TOKEN_TIMEOUT_S,
                "the streams' first tokens",
            )
            time.sleep(s.kill_after_s)
            if sig is not None:
                before = load_metric(self.server.metrics_port, CHAT_MODEL)
                killed_at = time.monotonic()
                os.kill(pid, sig)
                self.kills.append(killed_at)
                recovered_at, failed_polls = recover(target)
                after = load_metric(self.server.metrics_port, CHAT_MODEL)
            try:
                stdout, stderr = client.communicate(timeout=s.embed_duration_s + 120)
            except subprocess.TimeoutExpired:
                client.kill()
                stdout, stderr = client.communicate(timeout=10)
            for out in streams:  # no kill: the streams still running end with the embeds
                if not out.done.is_set() and out.call is not None:
                    out.call.cancel()
            for out in streams:
                out.done.wait(STREAM_END_TIMEOUT_S)
        finally:
            if client.poll() is None:
                client.kill()
                client.wait(10)
            for out in streams:
                if out.call is not None and not out.done.is_set():
                    out.call.cancel()
            channel.close()
        if client.returncode != 0 or not stdout.strip():
            raise RuntimeError(f"embed client failed ({client.returncode}): {stderr.strip()[-600:]}")
        embeds = json.loads(stdout.strip().splitlines()[-1])
        result: dict[str, Any] = {
            "records": embeds["records"],
            "wall_s": embeds["wall_s"],
            "load_s": load_s,
            "streams": [
                {
                    "tokens": o.tokens,
                    "code": o.code,
                    "reason": o.reason,
                    "ended_after_kill_s": (
                        None if killed_at is None or o.ended is None else o.ended - killed_at
                    ),
                }
                for o in streams
            ],
        }
        if killed_at is not None and recovered_at is not None:
            loads = after[1] - before[1]
            result["kill"] = {
                "signal": sig.name if sig else None,
                "recovery_s": recovered_at - killed_at,
                "failed_polls": failed_polls,
                "restart_load_s": (after[0] - before[0]) / loads if loads > 0 else float("nan"),
                "restart_backoff_s": restart_delay_s(collections.deque(self.kills), killed_at),
            }
        return result


def metrics(result: dict[str, Any]) -> dict[str, float]:
    """Per-run figures: embed latency and errors, and for a kill the streams' ends and the recovery."""
    records = result["records"]
    latencies = [r["latency_s"] for r in records if r.get("ok")]
    values = {
        "embed_p50_ms": percentile(latencies, 50) * 1000,
        "embed_p99_ms": percentile(latencies, 99) * 1000,
        "embed_errors": float(sum(1 for r in records if not r.get("ok"))),
        "embed_calls": float(len(latencies)),
        "load_s": result["load_s"],
        "stream_tokens_mean": sum(s["tokens"] for s in result["streams"]) / max(1, len(result["streams"])),
    }
    kill = result.get("kill")
    if kill:
        ends = [s["ended_after_kill_s"] for s in result["streams"] if s["ended_after_kill_s"] is not None]
        killed = [s for s in result["streams"] if s["code"] != "OK"]
        values["stream_end_max_s"] = max(ends, default=float("nan"))
        values["streams_backend_exited"] = float(
            sum(1 for s in killed if s["code"] == "UNAVAILABLE" and s["reason"] == BACKEND_EXITED)
        )
        values["streams_ended_otherwise"] = float(len(result["streams"]) - values["streams_backend_exited"])
        values["recovery_s"] = kill["recovery_s"]
        values["recovery_minus_load_s"] = kill["recovery_s"] - result["load_s"]
        values["restart_load_s"] = kill["restart_load_s"]
        values["recovery_minus_restart_load_s"] = kill["recovery_s"] - kill["restart_load_s"]
        values["restart_backoff_s"] = kill["restart_backoff_s"]
        values["recovery_failed_polls"] = float(kill["failed_polls"])
    return values


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the kills beside the reference; write the JSON, plot and README section."""
    cfg = parse_config(
        "backend_isolation",
        argv,
        __doc__,
        reps={"full": 5, "quick": 3, "tiny": 1},
        add_arguments=lambda parser: parser.add_argument(
            "--kill-spacing-s",
            type=float,
            help=f"least seconds between two kills (default: {RESTART_WINDOW_S:.0f}, tiny: 0)",
        ),
    )
    spacing = cfg.args.kill_spacing_s
    settings = Settings(
        embed_clients=cfg.pick(full=64, quick=64, tiny=8),
        embed_duration_s=cfg.pick(full=10.0, quick=8.0, tiny=3.0),
        streams=cfg.pick(full=8, quick=8, tiny=2),
        max_tokens=cfg.pick(full=256, quick=256, tiny=128),
        kill_after_s=cfg.pick(full=1.0, quick=1.0, tiny=0.3),
        kill_spacing_s=(
            spacing
            if spacing is not None
            else cfg.pick(full=RESTART_WINDOW_S, quick=RESTART_WINDOW_S, tiny=0.0)
        ),
    )
    model = {"chat": CHAT_MODEL, "embeddings": EMBED_MODEL, "banned_tokens": list(END_TOKENS)}
    title = "Backend isolation — the chat backend killed mid-stream while other clients embed"
    with Report(cfg, title, HEADLINE, model, settings.as_dict()) as report:
        ours = report.start_server(
            lambda: servers.start_ours(
                cfg.log_dir, name="ours-backends", env={"UR_BACKEND_PROCESSES": "true"}, metrics=True
            )
        )
        assert ours.grpc_target is not None
        for name in (EMBED_MODEL, CHAT_MODEL):
            servers.load_model(ours.grpc_target, name)
        warm = ["--mode", "grpc-embed", "--target", ours.grpc_target, "--model", EMBED_MODEL]
        run_load_client(warm, {"requests": 8, "concurrency": 8, "warmup": 1})
        runner = Runner(report, ours, settings)
        report.note(
            "each repetition runs the load without a kill (the reference) and with the chat backend "
            "killed by SIGKILL and by SIGSEGV, interleaved; x is the ratio to the run without the kill "
            "in the same repetition (goal: embed p99 <= 1.5x, 0 embed errors, streams end within 1 s "
            "with BACKEND_EXITED, recovery - load time <= 2 s)"
        )
        scenario = f"{settings.embed_clients} embed clients + {settings.streams} chat streams"
        params = {"duration_s": settings.embed_duration_s, "max_tokens": settings.max_tokens}
        report.compare(scenario, params, [report.add(c) for c in runner.contenders()], "no-kill", metrics)
        report.finish()
    return report.payload


if __name__ == "__main__":
    main(sys.argv[1:])
