"""The pieces of backend supervision that need no process: exits, backoff, metadata, errors."""

from __future__ import annotations

import collections
import signal

import grpc
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from engines.errors import InvalidArgumentError
from engines.fair_share import Caller, Priority, Share
from engines.reasons import Reason
from service.model_manager.backends.errors import error_from_status
from service.model_manager.backends.launcher import backend_settings_json, device_environment
from service.model_manager.backends.metadata import call_metadata, caller_of
from service.model_manager.backends.process import describe_exit, exit_label
from service.model_manager.managed import MAX_RESTART_BACKOFF_S, restart_delay_s
from service.quotas import QuotaExceededError
from service.settings import Settings
from service.status import status_for_error


def test_exits_are_described_by_signal_or_code():
    assert describe_exit(-signal.SIGSEGV) == "signal 11"
    assert describe_exit(1) == "exit code 1"
    assert exit_label(-signal.SIGSEGV) == "SIGSEGV"
    assert exit_label(-signal.SIGABRT) == "SIGABRT"
    assert exit_label(3) == "exit_3"
    assert exit_label(-200) == "signal_other"  # no such signal: the label set stays bounded


def test_restart_backoff_doubles_with_recent_exits_and_is_bounded():
    now = 1000.0
    assert restart_delay_s(collections.deque(), now) == 0.0
    assert restart_delay_s(collections.deque([now]), now) == pytest.approx(0.25)
    assert restart_delay_s(collections.deque([now - 1, now]), now) == pytest.approx(0.5)
    many = collections.deque([now - i for i in range(8)][::-1])
    assert restart_delay_s(many, now) == MAX_RESTART_BACKOFF_S
    # The wait counts from the last exit, and exits a minute old no longer count.
    assert restart_delay_s(collections.deque([now - 0.2]), now) == pytest.approx(0.05)
    assert restart_delay_s(collections.deque([now - 61, now - 70]), now) == 0.0


def test_caller_crosses_the_socket_unchanged():
    caller = Caller(name="team-a", role="user", share=Share("team-a", Priority.BATCH, 2.5), lane="team-a")
    sent = call_metadata(caller, "req-1")
    assert caller_of(sent) == (caller, "req-1", {})


def test_trace_context_crosses_with_the_call():
    provider = TracerProvider()
    with provider.get_tracer("test").start_as_current_span("call") as span:
        _, _, carrier = caller_of(call_metadata(Caller(), "r"))
    trace_id = format(span.get_span_context().trace_id, "032x")
    assert carrier["traceparent"].split("-")[1] == trace_id
    assert trace.get_current_span() is not span


def test_unreadable_caller_metadata_falls_back_to_defaults():
    caller, request_id, _ = caller_of([("x-ur-share-priority", "x"), ("x-ur-share-weight", "-3")])
    assert caller == Caller() and request_id == ""
    assert caller_of([("x-ur-share-weight", "nan")])[0] == Caller()


class _Failed(grpc.aio.AioRpcError):
    def __init__(self, status: grpc.Status) -> None:
        super().__init__(
            status.code, grpc.aio.Metadata(), grpc.aio.Metadata(*status.trailing_metadata), status.details
        )


def test_a_backend_error_comes_back_as_the_same_domain_error():
    sent = InvalidArgumentError("inputs must not be empty", reason=Reason.INPUT_TOO_LONG, field="inputs")
    error = error_from_status(_Failed(status_for_error(sent)))
    assert (error.status, error.reason, error.message) == ("INVALID_ARGUMENT", "INPUT_TOO_LONG", sent.message)
    assert error.metadata == {"field": "inputs"}
    again = status_for_error(error)
    assert (
        again.code == grpc.StatusCode.INVALID_ARGUMENT
        and again.trailing_metadata == status_for_error(sent).trailing_metadata
    )


def test_a_retry_delay_survives_the_hop():
    sent = QuotaExceededError("over quota", retry_after_s=1.5)
    error = error_from_status(_Failed(status_for_error(sent)))
    assert error.status == "RESOURCE_EXHAUSTED" and error.retry_after_s == pytest.approx(1.5)


def test_a_bare_status_keeps_its_code():
    bare = grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), "gone")
    error = error_from_status(bare)
    assert (error.status, error.reason) == ("UNAVAILABLE", "UNAVAILABLE")


def test_backends_see_only_their_device_and_no_secret():
    assert device_environment("cuda:1") == ({"CUDA_VISIBLE_DEVICES": "1"}, "cuda:0")
    assert device_environment("cpu") == ({"CUDA_VISIBLE_DEVICES": ""}, "cpu")
    assert device_environment("mps") == ({}, "mps")
    text = backend_settings_json(Settings(api_key="sk-secret-value", max_batch_inputs=7))
    assert "sk-secret" not in text and '"max_batch_inputs": 7' in text


def test_gpu_free_memory_comes_from_the_driver_without_a_cuda_context(monkeypatch):
    import subprocess

    from engines import device

    asked = []

    def fake_run(argv, **kwargs):
        asked.append(argv)
        return subprocess.CompletedProcess(argv, 0, stdout="2048\n", stderr="")

    monkeypatch.setattr(device.subprocess, "run", fake_run)
    assert device.cuda_free_bytes_from_driver("cuda:1") == 2048 << 20
    assert "--id=1" in asked[0]

    def missing(argv, **kwargs):
        raise FileNotFoundError("nvidia-smi")

    monkeypatch.setattr(device.subprocess, "run", missing)
    assert device.cuda_free_bytes_from_driver("cuda") is None


@pytest.mark.parametrize(
    ("line", "built"), [("cuda: Optional[str] = '12.4'", True), ("cuda: Optional[str] = None", False)]
)
def test_torchs_cuda_build_is_read_from_its_files(tmp_path, monkeypatch, line, built):
    import importlib.machinery

    from engines import device

    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("")
    (tmp_path / "torch" / "version.py").write_text(f"__version__ = '2.5.1'\n{line}\n")
    spec = importlib.machinery.ModuleSpec("torch", None, origin=str(tmp_path / "torch" / "__init__.py"))
    monkeypatch.setattr(device.importlib.util, "find_spec", lambda name: spec)
    device.torch_built_with_cuda.cache_clear()
    try:
        assert device.torch_built_with_cuda() is built
    finally:
        device.torch_built_with_cuda.cache_clear()


def test_the_server_picks_a_device_without_importing_torch(monkeypatch):
    from engines import device

    monkeypatch.setattr(device, "torch_built_with_cuda", lambda: True)
    monkeypatch.setattr(device, "driver_gpu_count", lambda: 2)
    assert device.resolve_device_without_torch("auto") == "cuda"
    assert device.resolve_device_without_torch("cuda:1") == "cuda:1"
    with pytest.raises(ValueError, match="CUDA is not available"):
        device.resolve_device_without_torch("cuda:2")
    monkeypatch.setattr(device, "driver_gpu_count", lambda: 0)
    assert device.resolve_device_without_torch("auto") in ("cpu", "mps")
    with pytest.raises(ValueError, match="unknown device"):
        device.resolve_device_without_torch("tpu")
