"""Starts this server's backend processes: their sockets, environment, devices and figures.

Every backend's socket lies in one directory made for the server (mode 0700), so only the
server's user can reach a backend. A backend's environment is the server's without its API keys
(a backend checks none), with the device it may see: ``CUDA_VISIBLE_DEVICES`` names its one GPU
(then ``cuda:0`` inside it), or none for a CPU model, so that a backend initialises only the
device runtime its engine needs.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import tempfile
from pathlib import Path

from service import metrics
from service.model_manager.backends.process import BackendProcess, backend_argv
from service.settings import Settings

#: The :class:`~service.settings.Settings` fields a backend reads; nothing else crosses (no API
#: key, TLS file or state store's options).
BACKEND_SETTINGS = frozenset(
    {
        # Request limits the converters enforce, as the server's.
        "max_tokens_limit",
        "max_choices",
        "max_batch_inputs",
        "audio_max_bytes",
        "audio_max_seconds",
        "speech_max_input_chars",
        "image_max_pixels",
        "image_max_n",
        "image_max_steps",
        "image_max_work",
        # The operator's own engines, imported before a load.
        "engine_modules",
        # Process plumbing.
        "device",
        "log_level",
        "otlp_endpoint",
        "event_loop",
        "metrics_enabled",
        "max_receive_message_bytes",
        "max_send_message_bytes",
        "shutdown_grace_s",
    }
)
#: Variables of the server's environment a backend never gets.
_SECRET_PREFIXES = ("UR_API_KEY", "UR_GATEWAY_API_KEY")


def backend_settings_json(settings: Settings) -> str:
    """The ``--settings-json`` of a backend this server starts: only :data:`BACKEND_SETTINGS`, as JSON."""
    return json.dumps(settings.model_dump(mode="json", include=set(BACKEND_SETTINGS)), sort_keys=True)


def device_environment(device: str) -> tuple[dict[str, str], str]:
    """The environment variables a backend on ``device`` gets, and the device's name inside it.

    ``cuda:N`` → ``CUDA_VISIBLE_DEVICES=N`` and ``cuda:0``; ``cpu`` → no visible GPU (the
    backend cannot start a CUDA context by accident); other devices (``mps``) unchanged.
    """
    if device.startswith("cuda"):
        index = device.partition(":")[2] or "0"
        return {"CUDA_VISIBLE_DEVICES": index}, "cuda:0"
    if device == "cpu":
        return {"CUDA_VISIBLE_DEVICES": ""}, "cpu"
    return {}, device


class BackendLauncher:
    """Starts backend processes (counted by ``ur_backend_starts_total``).

    Args:
        settings: the server's settings (the part in :data:`BACKEND_SETTINGS` goes to backends;
            ``backend_start_timeout_s`` bounds a start).

    """

    def __init__(self, settings: Settings) -> None:
        self._settings_json = backend_settings_json(settings)
        self._ready_timeout_s = settings.backend_start_timeout_s
        self._directory: Path | None = None
        self._numbers = itertools.count(1)

    def _socket_directory(self) -> Path:
        if self._directory is None:
            self._directory = Path(tempfile.mkdtemp(prefix="ur-backends-"))  # mode 0700
        return self._directory

    async def start(self, model: str, device: str) -> tuple[BackendProcess, str]:
        """Start a backend process for ``model`` on ``device``; the process and its name for the device.

        Raises:
            RuntimeError, TimeoutError, OSError: see :meth:`BackendProcess.start`.

        """
        socket_path = self._socket_directory() / f"{next(self._numbers)}.sock"
        env = {key: value for key, value in os.environ.items() if not key.startswith(_SECRET_PREFIXES)}
        # A failed GGML_ASSERT would attach gdb for a backtrace first: seconds before the backend
        # dies and its calls end. Its message still reaches the log.
        env.setdefault("GGML_NO_BACKTRACE", "1")
        visible, inner_device = device_environment(device)
        env.update(visible)
        process = BackendProcess(model, socket_path, backend_argv(socket_path, self._settings_json), env)
        metrics.backend_started(model)
        await process.start(self._ready_timeout_s)
        return process, inner_device

    def close(self) -> None:
        """Remove the sockets' directory (call once every backend has ended)."""
        if self._directory is not None:
            shutil.rmtree(self._directory, ignore_errors=True)
            self._directory = None
