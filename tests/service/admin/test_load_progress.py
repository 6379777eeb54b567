"""``universal-runtime load``: a progress bar from WatchModel on a terminal, and the final status."""

from __future__ import annotations

import asyncio
import io
import json

import pytest

from service.admin.main import run
from service.admin.progress import status_percent
from tests.service.admin.conftest import CLI_MODEL, Result, cli


class Terminal(io.StringIO):
    """Captured text that says it is a terminal, as stderr is when a person runs the command."""

    def isatty(self) -> bool:
        return True


async def on_terminal(*argv: str) -> Result:
    """Run ``universal-runtime <argv>`` in a thread with stderr a (captured) terminal."""
    out, err = io.StringIO(), Terminal()
    code = await asyncio.to_thread(run, list(argv), out, err)
    return Result(code, out.getvalue(), err.getvalue())


def drawn(err: str) -> list[str]:
    """The states the bar showed, in order: each redraw starts with a carriage return."""
    return [frame.strip() for frame in err.replace("\n", "\r").split("\r") if frame.strip()]


async def test_load_draws_a_bar_and_prints_the_final_status(address):
    loaded = await on_terminal("load", CLI_MODEL, "--keep-alive", "10m", "--address", address)
    assert loaded.code == 0, loaded.err
    frames = drawn(loaded.err)
    assert any(f.endswith(f"{CLI_MODEL}: Loading") for f in frames), frames
    last = frames[-1]
    assert last.startswith("100%|") and last.endswith(f"{CLI_MODEL}: Running: sentence_transformers on cpu")
    assert "|" + "#" * 24 + "|" in last  # a full bar
    first, second = loaded.out.splitlines()
    assert first.startswith(f"loaded {CLI_MODEL} on cpu (") and "MiB RAM, estimated " in first
    assert "keep-alive 10m0s" in first
    assert second == "status: Running: sentence_transformers on cpu"

    # Loaded already: one state, drawn full.
    again = await on_terminal("load", CLI_MODEL, "--address", address)
    assert again.code == 0, again.err
    assert [f.startswith("100%|") for f in drawn(again.err)][-1]

    # A pipe or a log gets no bar; --json prints the model with its estimate.
    piped = await cli("load", CLI_MODEL, "--json", "--address", address)
    assert piped.code == 0 and piped.err == ""
    shown = json.loads(piped.out)
    assert shown["status_detail"] == "Running: sentence_transformers on cpu"
    assert shown["required_ram_bytes"] > 10_000_000 and shown["required_vram_bytes"] == 0
    assert (await cli("unload", CLI_MODEL, "--address", address)).code == 0


async def test_a_failed_load_shows_its_error_then_one_error_line(address):
    failed = await on_terminal("load", "cli-missing", "--address", address)
    assert failed.code == 1
    *bar, error = failed.err.splitlines()
    assert error.startswith("universal-runtime load: FAILED_PRECONDITION: ") and "does not exist" in error
    assert any("cli-missing: Error: " in frame for frame in drawn("\n".join(bar)))
    assert failed.out == ""

    # Refused before any message (no such model): no bar, one line.
    unknown = await on_terminal("load", "no-such-model", "--address", address)
    assert unknown.code == 1
    assert unknown.err.startswith("universal-runtime load: NOT_FOUND: ") and unknown.err.count("\n") == 1


@pytest.mark.parametrize(
    ("detail", "percent"),
    [
        ("Installing: downloading 42%", 42.0),
        ("Installing: downloading 7.5%", 7.5),
        ("Installing: converting", None),
        ("Loading", None),
        ("Installing: downloading 250%", 100.0),
    ],
)
def test_the_bar_reads_the_percentage_of_a_status(detail, percent):
    assert status_percent(detail) == percent
