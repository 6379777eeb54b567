"""Shared pieces of the batch tests: a store on a temporary folder with a clock the test moves, and JSONL files."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from engines.state_store import LocalStateStore
from service.batches.lines import InputLimits
from service.batches.store import BatchApiStore, StoreLimits

LIMITS = StoreLimits(
    InputLimits(max_bytes=64 * 1024, max_lines=50, line_max_bytes=4096), max_files=8, max_batches=4
)


class Clock:
    """Seconds since the epoch that move only when the test says."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def tick(self, seconds: float = 1.0) -> None:
        self.now += seconds


def make_store(folder: Path, clock: Clock, limits: StoreLimits = LIMITS) -> BatchApiStore:
    """A batch store in ``folder`` on ``clock``."""
    return BatchApiStore(LocalStateStore(folder), limits, clock)


def line(custom_id: str, url: str = "/v1/embeddings", **body: Any) -> dict[str, Any]:
    """One request line."""
    return {"custom_id": custom_id, "method": "POST", "url": url, "body": body or {"input": custom_id}}


def jsonl(*lines: Any) -> bytes:
    """Lines as a JSONL file (a str is written as it is)."""
    return "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines).encode()


def parse_jsonl(data: bytes) -> list[dict[str, Any]]:
    """A JSONL file's objects."""
    return [json.loads(x) for x in data.decode().splitlines() if x.strip()]


class FakeExecutor:
    """Answers ``{"echo": input}``; ``fail`` in a body answers 400, ``raise`` raises; a gate holds lines."""

    def __init__(self, gated: bool = False) -> None:
        self.calls: list[tuple[str, str, str]] = []
        self.gate = asyncio.Event()
        if not gated:
            self.gate.set()
        self.in_flight = 0
        self.most_in_flight = 0
        self.on_call = None

    async def __call__(self, url: str, body: dict[str, Any], key_name: str, *, request_id: str):
        self.calls.append((body["input"], key_name, url))
        if self.on_call is not None:
            self.on_call(len(self.calls))
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await self.gate.wait()
        finally:
            self.in_flight -= 1
        if body.get("fail"):
            return 400, {
                "error": {"message": "input rejected", "type": "invalid_request_error", "code": "bad_input"}
            }
        if body.get("raise"):
            raise RuntimeError("boom")
        return 200, {"echo": body["input"]}


async def settle(calls: int, *fakes: FakeExecutor) -> None:
    """Wait until ``calls`` lines reached the executors (each passes store work on the lane first),
    then a little more, time for a line over the bound to arrive too."""
    for _ in range(500):  # at most 5 s: far more than a few local file writes take
        if sum(len(fake.calls) for fake in fakes) >= calls:
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.1)
