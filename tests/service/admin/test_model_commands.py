"""``ps``, ``ls``, ``load``, ``unload`` and ``health`` against a real server with a real model."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

from tests.conftest import REPO_ROOT, child_server_env, free_port
from tests.service.admin.conftest import CLI_MODEL, cli


def one_line(text: str) -> str:
    lines = text.splitlines()
    assert len(lines) == 1, text
    assert "Traceback" not in text
    return lines[0]


async def test_ls_lists_the_catalog_as_a_table_and_as_json(address):
    table = await cli("ls", "--address", address)
    assert table.code == 0, table.err
    header, *rows = table.out.splitlines()
    assert header.split() == ["NAME", "TASKS", "BACKEND", "SOURCE", "LOADED"]
    by_name = {row.split()[0]: row.split() for row in rows}
    assert by_name[CLI_MODEL][1:3] == ["embed", "sentence_transformers"]
    assert by_name["cli-missing"][-1] == "error"  # a missing source is marked at start-up

    listed = await cli("ls", "--json", "--address", address)
    models = {m["name"]: m for m in json.loads(listed.out)}
    assert set(models) == {CLI_MODEL, "cli-missing"}
    assert models[CLI_MODEL]["tasks"] == ["embed"]
    assert models["cli-missing"]["status_detail"].startswith("Error: ")


async def test_load_ps_and_unload_a_model(address):
    loaded = await cli("load", CLI_MODEL, "--keep-alive", "10m", "--address", address)
    assert loaded.code == 0, loaded.err
    assert loaded.out.startswith(f"loaded {CLI_MODEL} on cpu (") and "keep-alive 10m0s" in loaded.out

    table = await cli("ps", "--address", address)
    assert table.code == 0, table.err
    header, row = table.out.splitlines()
    assert "EXPIRES IN" in header and "ACTIVE" in header
    cells = row.split("   ")
    cells = [c.strip() for c in cells if c.strip()]
    # PID "-": this test's server runs its models in its own process (no backend process).
    assert cells[:4] == [CLI_MODEL, "sentence_transformers", "-", "cpu"]
    assert cells[4].endswith("MiB")  # RAM
    assert cells[6] == "10m0s" and cells[7].startswith(("9m", "10m")) and cells[8] == "0"
    assert cells[9] == "ready"

    (shown,) = json.loads((await cli("ps", "--json", "--address", address)).out)
    assert shown["name"] == CLI_MODEL and shown["ram_bytes"] > 10_000_000
    assert shown["keep_alive"] == "10m0s" and 590 <= shown["expires_in_s"] <= 600
    assert shown["active_requests"] == 0 and shown["pinned"] is False
    assert shown["backend_pid"] is None and shown["backend_starts"] is None

    pinned = await cli("load", CLI_MODEL, "--pin", "--json", "--address", address)
    assert json.loads(pinned.out)["pinned"] is True
    assert "never (pinned)" in (await cli("ps", "--address", address)).out

    refused = await cli("unload", CLI_MODEL, "--address", address)
    assert refused.code == 1
    assert one_line(refused.err).startswith("universal-runtime unload: FAILED_PRECONDITION: ")

    unloaded = await cli("unload", CLI_MODEL, "--force", "--address", address)
    assert unloaded.code == 0, unloaded.err
    assert unloaded.out == f"unloaded {CLI_MODEL} (Not Loaded)\n"
    assert json.loads((await cli("ps", "--json", "--address", address)).out) == []
    assert (await cli("ps", "--address", address)).out.split() == [
        "NAME", "BACKEND", "PID", "DEVICE", "RAM", "VRAM", "KEEP", "ALIVE", "EXPIRES", "IN", "ACTIVE", "STATUS",
    ]  # fmt: skip


async def test_health_shows_every_service(address):
    table = await cli("health", "--address", address)
    assert table.code == 0, table.err
    assert table.out.splitlines()[1].split() == ["(overall)", "SERVING"]
    answer = json.loads((await cli("health", "--json", "--address", address)).out)
    assert answer["services"] == {
        "": "SERVING",
        "universal_runtime.v1.InferenceService": "SERVING",
        "universal_runtime.v1.ModelService": "SERVING",
    }


async def test_errors_are_one_line_and_a_non_zero_exit(address):
    unknown = await cli("load", "no-such-model", "--address", address)
    assert unknown.code == 1
    assert one_line(unknown.err).startswith("universal-runtime load: NOT_FOUND: ")

    bad = await cli("load", CLI_MODEL, "--keep-alive", "soon", "--address", address)
    assert bad.code == 1 and "INVALID_ARGUMENT" in one_line(bad.err)

    failed = await cli("load", "cli-missing", "--address", address)
    assert failed.code == 1 and "FAILED_PRECONDITION" in one_line(failed.err)

    down = f"127.0.0.1:{free_port()}"
    for command in ("ps", "ls", "health"):
        result = await cli(command, "--address", down, "--timeout", "5")
        assert result.code == 1 and result.out == ""
        assert one_line(result.err).startswith(
            f"universal-runtime {command}: cannot reach the server at {down}"
        )

    usage = await cli("load")  # argparse: usage and the missing argument, exit 2
    assert usage.code == 2


async def test_the_console_entry_point_runs_subcommands_in_a_child_process(address):
    """``python -m service.cli ls --json`` (what the console script runs); no server: one line.

    The child runs in a thread: the server it calls lives on this test's event loop.
    """
    env = child_server_env()
    env.pop("UR_API_KEY", None)
    listed = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "service.cli", "ls", "--json", "--address", address],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    assert CLI_MODEL in {m["name"] for m in json.loads(listed.stdout)}

    down = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "service.cli", "ps", "--address", f"127.0.0.1:{free_port()}"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert down.returncode == 1 and down.stdout == ""
    assert one_line(down.stderr).startswith("universal-runtime ps: cannot reach the server")


async def test_default_address_comes_from_the_server_settings(address, monkeypatch):
    port = address.rsplit(":", 1)[1]
    monkeypatch.setenv("UR_GRPC_HOST", "0.0.0.0")  # a wildcard bind is dialled on the loopback
    monkeypatch.setenv("UR_GRPC_PORT", port)
    assert (await cli("health")).code == 0


async def test_load_with_option_overrides(address):
    loaded = await cli(
        "load",
        CLI_MODEL,
        "--option",
        "max_batch_size=16",
        "-o",
        "runtime=torch",
        "--json",
        "--address",
        address,
    )
    assert loaded.code == 0, loaded.err
    assert json.loads(loaded.out)["options"] == {"max_batch_size": 16, "runtime": "torch"}
    again = await cli(
        "load", CLI_MODEL, "-o", "max_batch_size=16.0", "-o", "runtime=torch", "--address", address
    )
    assert again.code == 0, again.err  # the same options: nothing to do
    other = await cli("load", CLI_MODEL, "-o", "max_batch_size=8", "--address", address)
    assert other.code == 1
    assert one_line(other.err).startswith("universal-runtime load: FAILED_PRECONDITION: ")
    assert "unload it first" in other.err
    assert (
        await cli("unload", CLI_MODEL, "--force", "--address", address)
    ).code == 0  # --force: pinning outlives an unload

    bad = await cli("load", CLI_MODEL, "-o", "max_batch_size=0", "--address", address)
    assert bad.code == 1
    line = one_line(bad.err)
    assert line.startswith("universal-runtime load: INVALID_ARGUMENT: ") and "option max_batch_size" in line
    unknown = await cli("load", CLI_MODEL, "-o", "max_batch=4", "--address", address)
    assert unknown.code == 1 and "did you mean max_batch_size?" in one_line(unknown.err)
    malformed = await cli("load", CLI_MODEL, "-o", "max_batch_size", "--address", address)
    assert malformed.code == 2
    assert one_line(malformed.err) == "universal-runtime load: --option needs KEY=VALUE, got 'max_batch_size'"
