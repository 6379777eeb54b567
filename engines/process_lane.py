"""A process lane: blocking work in a child process that can be killed, at a lower CPU priority.

A thread lane (:mod:`engines.executor`) shares the server's GIL and cannot be interrupted. Work
that holds the GIL for long stretches (scikit-learn fitting a 200,000-row isolation forest) or
that cannot be stopped (PDFium painting a page whose content stream decompresses to millions
of operators) runs here instead: one child process per lane, one job at a time, started from
the forkserver (a small process started once with only the lanes' modules imported, so that a
restart after a kill costs milliseconds, not a new interpreter's imports). The child runs at
nice +:data:`DEFAULT_NICENESS`, so the models' lanes get the cores first.

A job that overruns its time limit, or whose caller is cancelled (client cancel, deadline),
kills the child; the next job starts a new one. A job is a module-level function and picklable
arguments; its result comes back pickled. Errors: a :class:`~engines.errors.RuntimeServiceError`
raised in the child reaches the caller as it was raised; any other exception is INTERNAL
(a :class:`RuntimeError` naming its type; the child keeps serving); a child that dies by itself
is INTERNAL too (:class:`ChildProcessError`).
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from multiprocessing.connection import Connection
from typing import Any, ParamSpec, TypeVar

from engines.errors import RuntimeServiceError
from engines.fair_queue import FairQueue
from engines.fair_share import Share, current_caller, current_share

P = ParamSpec("P")
T = TypeVar("T")

#: Added to a lane child's niceness (0-19 on Linux; higher yields the CPU to others first).
DEFAULT_NICENESS = 10

# Modules every lane child needs, imported once by the forkserver when it starts (a lane made
# after the forkserver started imports its module in the child, once per child).
_PRELOAD: set[str] = {__name__}
_PRELOAD_LOCK = threading.Lock()


def preload_modules(*modules: str) -> None:
    """Have the forkserver import ``modules`` when it starts, so that lane children start warm.

    Each child re-runs the parent's main module (multiprocessing's "main fixup"): for the server
    that imported the whole service stack, a CPU cost per child, at normal priority, after every
    kill. With the main module (``python -m`` name, added here) or what a launcher
    script imports (the caller names it) preloaded, the re-run finds its imports cached. Takes
    effect only before the first lane starts its child.
    """
    main_name = getattr(getattr(sys.modules.get("__main__"), "__spec__", None), "name", None)
    extra = (main_name,) if main_name and not main_name.endswith("__main__") else ()
    context = multiprocessing.get_context("forkserver")
    with _PRELOAD_LOCK:
        _PRELOAD.update(modules, extra)
        context.set_forkserver_preload(sorted(_PRELOAD))


class FairTurns:
    """Whose job runs next on a lane: a :class:`~engines.fair_queue.FairQueue` of the waiting callers' turns.

    Priority classes first (every interactive job before any batch one, by the caller's
    :class:`~engines.fair_share.Share`), then start-time fair queuing between callers where a job
    costs the seconds it held the lane divided by its key's weight, charged when it ends. A caller
    with nothing waiting or running starts level with the least-served one, so one caller's slow
    jobs (six PDF pages at their time limit) do not queue another caller's behind all of them: the
    other waits for the job running when it came, then goes first. Ties go to the caller that
    came first; one caller's jobs run in the order they came. The next job is picked a loop turn
    after a job ends, so that the caller whose job ended can queue its next one (a document's
    next page) and be counted. A caller's state lives while it has a job waiting or running. Use
    from one event loop.

    Args:
        name: the lane's name (the ``model`` label of the queue's metrics).

    """

    def __init__(self, name: str = "") -> None:
        self._busy = False
        self._queue: FairQueue[asyncio.Future[None]] = FairQueue(name)

    async def acquire(self, caller: str, share: Share | None = None) -> None:
        """Wait for ``caller``'s turn (cancellable: a cancelled wait gives its turn on).

        Args:
            caller: who the job is for (:attr:`engines.fair_share.Caller.lane`): the fair-share identity.
            share: its key's class and weight (the current call's when None).

        """
        share = share or current_share()
        turn = asyncio.get_running_loop().create_future()
        self._queue.push(turn, share, cost=0.0, flow=caller)  # its cost is charged at release
        if not self._busy:  # nothing runs, so nothing waits: this turn is the only one queued
            self._busy = True
            self._queue.pop(hold=True)
            return
        try:
            await turn
        except BaseException:
            if turn.done() and not turn.cancelled():
                self.release(caller, 0.0, share)  # the turn came as the caller left: pass it on
            else:
                self._queue.discard(turn)
            raise

    def release(self, caller: str, used_s: float, share: Share | None = None) -> None:
        """End ``caller``'s job, which held the lane for ``used_s`` seconds; the next is picked soon.

        ``share`` is the one the job's turn was acquired with (the current call's when None).
        """
        self._queue.charge(share or current_share(), used_s, flow=caller)
        asyncio.get_running_loop().call_soon(self._grant)

    def _grant(self) -> None:
        while (turn := self._queue.peek()) is not None:  # bounded by the turns queued
            if turn.done():  # its caller was cancelled and has not removed it yet
                self._queue.discard(turn)
                continue
            self._queue.pop(hold=True)
            turn.set_result(None)
            return
        self._busy = False


async def take_turn(turns: FairTurns, job: Callable[[], Awaitable[T]]) -> T:
    """Run ``job()`` in the current call's turn on ``turns``, charging the seconds it took.

    The caller's lane and share come from :func:`~engines.fair_share.current_caller`, read here,
    in the caller's context. For a thread lane (a model's
    :class:`~engines.executor.DeviceExecutor`, first in first out) this puts fair turns in front
    of it: the OCR and layout engines take a turn for each page job, so one caller's pages do
    not queue another's page behind all of them.

    Raises:
        Whatever ``job()`` raises; asyncio.CancelledError while waiting for the turn (it passes on).

    """
    caller = current_caller()
    await turns.acquire(caller.lane, caller.share)
    started = time.monotonic()
    try:
        return await job()
    finally:
        turns.release(caller.lane, time.monotonic() - started, caller.share)


def _serve(conn: Connection, niceness: int) -> None:
    """The child's loop: answer ``(function, args)`` jobs until EOF.

    Each answer is ``("ok", value)``, ``("error", class, message, reason, metadata)`` for a
    service error, or ``("crash", type name, message)`` for any other exception.
    """
    with contextlib.suppress(OSError):  # not permitted: run at normal priority
        os.nice(niceness)
    while True:
        try:
            function, args = conn.recv()
        except EOFError:
            return
        try:
            conn.send(("ok", function(*args)))
        except RuntimeServiceError as exc:
            conn.send(("error", type(exc), exc.message, exc.reason, exc.metadata))
        except Exception as exc:  # reported to the caller; the child keeps serving
            conn.send(("crash", type(exc).__name__, str(exc)[:500]))


class ProcessLane:
    """One child process that runs jobs one at a time, killed when a job overruns or is cancelled.

    Use from one event loop; callers (their :attr:`~engines.fair_share.Caller.lane`) take turns
    (:class:`FairTurns`: by
    their shares' priority class, then fair share by lane time), one caller's jobs in the order
    they were awaited.

    Args:
        name: the child's process name (``ps``, logs).
        preload: modules the jobs' functions live in (see :func:`preload_modules`).
        niceness: added to the child's niceness.

    """

    def __init__(self, name: str, preload: tuple[str, ...] = (), niceness: int = DEFAULT_NICENESS) -> None:
        self.name = name
        self._niceness = niceness
        self._context = multiprocessing.get_context("forkserver")
        preload_modules(*preload)
        self._process: multiprocessing.process.BaseProcess | None = None
        self._conn: Connection | None = None
        self._turns = FairTurns(name)
        self._start_lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        """The child's process id, or None when none is running (for tests and logs)."""
        process = self._process
        return process.pid if process is not None and process.is_alive() else None

    async def run(self, function: Callable[P, T], *args: Any, timeout_s: float | None = None) -> T:
        """Run ``function(*args)`` in the child and return its result.

        Args:
            function: a module-level function (pickled by reference).
            args: its arguments (pickled: numpy arrays travel as buffers).
            timeout_s: seconds the job may run (None: until it ends or the caller is cancelled).

        Raises:
            TimeoutError: past ``timeout_s``; the child was killed.
            asyncio.CancelledError: the caller was cancelled; the child was killed.
            RuntimeServiceError: what the job raised.
            RuntimeError: the job raised another exception (its type and message).
            ChildProcessError: the child died by itself (killed by the OS, a crash in C code).

        """
        caller = current_caller()
        await self._turns.acquire(caller.lane, caller.share)
        started = time.monotonic()
        try:
            # In a thread: the first start waits for the forkserver to import the lanes' modules
            # (about a second), and every start for its fork; neither may hold the event loop.
            conn = await asyncio.to_thread(self._connection)
            try:
                exchange = asyncio.to_thread(_exchange, conn, (function, args))
                answer = await asyncio.wait_for(exchange, timeout_s)
            except TimeoutError:  # before OSError, its base class
                self.stop()
                raise
            except (EOFError, OSError) as exc:
                self.stop()
                raise ChildProcessError(f"the {self.name} process ended during a job") from exc
            except BaseException:  # cancelled (client cancel, deadline)
                self.stop()
                raise
        finally:
            self._turns.release(caller.lane, time.monotonic() - started, caller.share)
        if answer[0] == "error":
            _, cls, message, reason, metadata = answer
            raise cls(message, reason=reason, **metadata)
        if answer[0] == "crash":
            raise RuntimeError(f"{answer[1]} in the {self.name} process: {answer[2]}")
        return answer[1]

    def stop(self) -> None:
        """Kill the child if one runs (blocking for at most a second)."""
        with self._start_lock:
            process, self._process, self._conn = self._process, None, None
        if process is not None:
            process.kill()
            process.join(1.0)

    def _connection(self) -> Connection:
        with self._start_lock:
            if self._process is None or not self._process.is_alive():
                parent, child = self._context.Pipe()
                process = self._context.Process(
                    target=_serve, args=(child, self._niceness), name=self.name, daemon=True
                )
                process.start()
                child.close()  # so that the parent's recv sees EOF when the child dies
                self._process, self._conn = process, parent
            assert self._conn is not None
            return self._conn


def _exchange(conn: Connection, request: tuple) -> tuple:
    """Send ``request`` and wait for the answer (blocking; in a helper thread).

    After a kill the pipe breaks (EOFError, OSError): the connection is closed here, by the one
    thread that uses it, and the error goes to a caller that no longer waits for it.
    """
    try:
        conn.send(request)
        return conn.recv()
    except (EOFError, OSError):
        with contextlib.suppress(OSError):
            conn.close()
        raise
