"""What the manager does when a model's backend process exits by itself.

Only that model is touched: its status becomes ``Error: backend exited (signal 11)``, its calls
in flight end with BACKEND_EXITED (:class:`~service.model_manager.backends.remote.RemoteEngine`),
and the next request starts a new backend after a backoff
(:func:`~service.model_manager.managed.restart_delay_s`). A pinned or preloaded model is started
again at once, in the background, once per exit: if that load fails too, the model stays ``Error``
until a request or LoadModel asks for it again.
"""

from __future__ import annotations

import logging
import time

from engines.errors import RuntimeServiceError
from engines.executor import ExecutorPool
from engines.types import MemoryUsage
from service import metrics
from service.model_manager.backends.process import exit_label
from service.model_manager.backends.remote import RemoteEngine
from service.model_manager.leases import Leases
from service.model_manager.loading import Loader
from service.model_manager.managed import ManagedModel, ModelState

log = logging.getLogger("service.model_manager")


class BackendExits:
    """Handles backend exits the server did not ask for.

    Args:
        executors: the lanes; the dead backend's lane in this process is retired.
        leases: runs the restart of a pinned or preloaded model in the background.
        loader: loads the model again.

    """

    def __init__(self, executors: ExecutorPool, leases: Leases, loader: Loader) -> None:
        self._executors = executors
        self._leases = leases
        self._loader = loader

    def exited(self, managed: ManagedModel, remote: RemoteEngine) -> None:
        """Record the exit of ``remote``'s backend and take the model out of service (on the event loop)."""
        process = remote.process
        assert process is not None and process.returncode is not None
        name = managed.spec.name
        how, label = process.exit_description, exit_label(process.returncode)
        metrics.backend_exited(name, label)
        log.error(
            "backend process exited",
            extra={
                "model": name,
                "backend_pid": process.pid,
                "exit": how,
                "signal": label,
                "last_output": process.last_lines(),
            },
        )
        if managed.engine is not remote:
            return
        managed.backend_exits.append(time.monotonic())
        managed.engine = None
        managed.memory = MemoryUsage()
        managed.loaded_at = 0.0
        managed.error = f"backend exited ({how})"
        managed.state = ModelState.ERROR
        self._executors.retire(remote.executor)
        if managed.pinned or managed.spec.preload:
            self._leases.spawn(self._restart(managed))

    async def _restart(self, managed: ManagedModel) -> None:
        """Load a pinned or preloaded model again after its backend's exit (once)."""
        async with managed.lock:
            if managed.state is not ModelState.ERROR or managed.engine is not None:
                return  # a request has loaded it meanwhile
            try:
                self._leases.refuse_if_closing()
                await self._loader.load_locked(managed)
            except RuntimeServiceError as exc:
                log.error(
                    "restart after backend exit failed",
                    extra={"model": managed.spec.name, "error": exc.message},
                )
