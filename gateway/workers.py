"""Several gateway processes on one listening socket (``UR_GATEWAY_WORKERS``).

The gateway holds no state of its own (every answer comes from the gRPC server), so N copies can
serve one port: the parent binds the socket once, starts N worker processes (``spawn``, so no
gRPC channel or event loop crosses a fork), and the kernel hands each new connection to one of
them. Each worker runs the whole one-process gateway (its own channel, HTTPS reload, graceful
shutdown). It pays only on a machine with cores to spare: the HTTP side of a call (parsing,
routing, JSON) then runs beside the server instead of on one Python thread; where the models
already use every core, more processes only add switching.
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import signal
import socket
from collections.abc import Callable
from types import FrameType
from typing import Any

import uvicorn

logger = logging.getLogger(__name__)

#: Seconds the parent waits for a worker to finish on shutdown, on top of the streams' grace.
STOP_MARGIN_S = 5.0


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind the listening socket the workers share, as uvicorn binds its own (IPv4 or IPv6 host).

    Raises:
        SystemExit: The address cannot be bound (uvicorn logs why).

    """
    return uvicorn.Config(app=None, host=host, port=port).bind_socket()


def run_workers(
    count: int,
    serve: Callable[[Any, socket.socket], None],
    arguments: Any,
    *,
    host: str,
    port: int,
    grace_s: float,
) -> int:
    """Run ``serve(arguments, sock)`` in ``count`` processes sharing one socket, until signalled.

    SIGTERM or SIGINT to the parent is passed on to every worker (each drains like a single
    gateway); when one worker exits on its own, the others are stopped too, so a supervisor
    (Kubernetes, systemd) sees the failure and restarts the whole gateway.

    Args:
        count: Number of worker processes (at least 1).
        serve: Module-level function (picklable) that builds the app and serves on ``sock``.
        arguments: Its first argument (picklable), e.g. the gateway's settings.
        host: Interface to bind.
        port: Port to bind; 0 picks a free one.
        grace_s: Seconds a worker may take to drain before it is killed.

    Returns:
        The exit status: 0 after a signal, else the first non-zero status of a worker.

    """
    sock = bind_socket(host, port)
    context = multiprocessing.get_context("spawn")
    workers = [
        context.Process(target=serve, args=(arguments, sock), name=f"gateway-worker-{n}", daemon=False)
        for n in range(count)
    ]
    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        for worker in workers:
            if worker.is_alive():
                worker.terminate()  # SIGTERM: uvicorn's graceful shutdown in the worker

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        for worker in workers:
            worker.start()
        sock.close()  # the workers hold their own copies
        logger.info("gateway serving on %s:%d with %d worker processes", host, port, count)
        status = 0
        sentinels = {worker.sentinel: worker for worker in workers}
        while sentinels:
            ready = multiprocessing.connection.wait(list(sentinels))
            for sentinel in ready:
                worker = sentinels.pop(sentinel)
                worker.join()
                if not stopping:
                    status = worker.exitcode or 1
                    logger.error("gateway worker %s exited (%s); stopping the others", worker.name, status)
                    stop(signal.SIGTERM, None)
        return status
    finally:
        for worker in workers:
            worker.join(grace_s + STOP_MARGIN_S)
            if worker.is_alive():
                worker.kill()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
