"""A caller in another language: examples/node/client.mjs runs against the server and sees the contract."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from gateway.grpc_clients import SERVICE_CONFIG
from tests.conftest import CHAT_MODEL, EMBED_MODEL

NODE_DIR = Path(__file__).resolve().parents[2] / "examples" / "node"
CLIENT_TIMEOUT_S = 120
NPM_CI_TIMEOUT_S = 300


async def run(*args: str, cwd: Path, limit_s: float) -> tuple[int, str, str]:
    # A subprocess awaited on the test's loop, so the in-process server keeps serving meanwhile.
    process = await asyncio.create_subprocess_exec(
        *args, cwd=cwd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    try:
        stdout, stderr = await asyncio.wait_for(process.communicate(), limit_s)
    except TimeoutError:
        process.kill()
        await process.wait()
        pytest.fail(f"{' '.join(args)} did not finish within {limit_s} s")
    return process.returncode, stdout.decode(), stderr.decode()


@pytest.fixture(scope="module")
async def node() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the Node example client cannot run")
    if not (NODE_DIR / "node_modules").is_dir():
        # `make test` installs them through `make node-deps`; a bare `pytest` run does it here.
        npm = shutil.which("npm")
        assert npm, "node is installed but npm is not: cannot install examples/node packages"
        rc, out, err = await run(npm, "ci", "--no-audit", "--no-fund", cwd=NODE_DIR, limit_s=NPM_CI_TIMEOUT_S)
        assert rc == 0, f"npm ci failed in {NODE_DIR}:\n{out}\n{err}"
    return node


async def test_node_client_streams_cancels_embeds_and_decodes_errors(node, server):
    rc, out, err = await run(
        node, "client.mjs", f"127.0.0.1:{server.port}", cwd=NODE_DIR, limit_s=CLIENT_TIMEOUT_S
    )
    assert rc == 0, f"client.mjs exited {rc}\nstdout:\n{out}\nstderr:\n{err}"

    lines = [line.partition(" ") for line in out.splitlines()]
    values: dict[str, list[str]] = {}
    for keyword, _, value in lines:
        values.setdefault(keyword, []).append(value)

    # Its channel balances and retries like the gateway's (one config, two languages).
    assert json.loads(values["SERVICE_CONFIG"][0]) == SERVICE_CONFIG
    assert values["HEALTH"] == ["SERVING"]
    listed = {value.split()[0] for value in values["MODEL"]}
    assert {CHAT_MODEL, EMBED_MODEL} <= listed

    tokens = [json.loads(value) for value in values["TOKEN"]]
    assert len(tokens) >= 3, out
    assert "".join(tokens).strip()
    token_ids = int(values["TOKEN_IDS"][0])
    usage = json.loads(values["USAGE"][0])
    assert usage["completion_tokens"] == token_ids > 0
    assert usage["prompt_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert values["FINISH"][0] in {"FINISH_REASON_STOP", "FINISH_REASON_LENGTH"}

    # Cancelled after 3 tokens; a message may carry a few, so allow a little over.
    (cancelled,) = values["CANCELLED"]
    n = int(cancelled.removeprefix("after ").removesuffix(" tokens"))
    assert 3 <= n <= 8, cancelled

    assert values["DIMENSIONS"] == ["384"]
    assert 0.5 < float(values["COSINE"][0]) <= 1.0 + 1e-6

    assert "ERROR NOT_FOUND MODEL_NOT_FOUND" in out.splitlines()
    info = json.loads(values["ERROR_INFO"][0])
    assert info["domain"] == "universal-runtime"
    assert info["metadata"]["model"] == "no-such-model"
