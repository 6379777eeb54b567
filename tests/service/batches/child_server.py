"""A real server process whose batch runner runs lines with a slow fake executor (the kill -9 test).

``python -m tests.service.batches.child_server RUN_LOG``: settings from the ``UR_`` environment; every line
the executor starts is appended to RUN_LOG (its ``input``) before it runs for ``LINE_S`` seconds,
so the test can count how often each line ran across a crash. Prints the gRPC port once serving;
SIGTERM stops it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from typing import Any

from service.server import start_server
from service.settings import Settings


def note(run_log: str, text: str) -> None:
    """Append ``text`` as a line of ``run_log`` (a few bytes: no need to leave the event loop)."""
    with open(run_log, "a", encoding="utf-8") as log:
        log.write(f"{text}\n")


async def main(run_log: str) -> None:
    running = await start_server(Settings())
    line_s = float(os.environ.get("LINE_S", "0.2"))

    async def execute(url: str, body: dict[str, Any], key_name: str, *, request_id: str) -> tuple[int, Any]:
        note(run_log, body["input"])
        await asyncio.sleep(line_s)
        return 200, {"echo": body["input"], "key": key_name}

    assert running.batches is not None
    running.batches.start(execute)
    print(running.port, flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await running.stop(grace=1.0)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
