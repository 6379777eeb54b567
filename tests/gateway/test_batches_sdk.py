"""The Batch API end to end: the OpenAI SDK -> gateway -> BatchService -> runner -> the gateway's
route code (the line executor, calls of the core as the submitting key) -> real models, on a
server with two keys.

The server is started as ``universal-runtime`` starts it (:func:`service.cli.start_batch_lines`
wires the runner to the executor), in this process, with its own state folder.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import openai
import pytest
import yaml

from gateway.app import create_app
from service.cli import start_batch_lines
from service.server import start_server
from service.shared.api_keys import load_api_keys
from tests.conftest import CHAT_MODEL, DOCUMENT_EMBED_MODEL, EMBED_MODEL, MAX_MESSAGE_BYTES, RERANK_MODEL
from tests.gateway.gateway_fakes import serve_with_uvicorn
from tests.service.ocr.helpers import render_lines

KEYS = {"team-a": "team-a-secret-0123456789abcdef", "team-b": "team-b-secret-0123456789abcdef"}
FILE_MAX_BYTES = 256 * 1024
LINE_MAX_BYTES = 128 * 1024
#: Seconds a batch of the test may take to finish (a hang fails; the lines take a few seconds).
BATCH_DEADLINE_S = 120.0


@pytest.fixture(scope="module")
async def urls(settings, tmp_path_factory) -> AsyncIterator[str]:
    """The base URL of a gateway in front of a server with keys and a running batch runner."""
    folder = tmp_path_factory.mktemp("batches")
    keys_file = folder / "keys.yaml"
    keys_file.write_text(yaml.safe_dump(KEYS))
    keyed = settings.model_copy(
        update={
            "api_keys_file": keys_file,
            "data_dir": folder / "data",
            "batch_file_max_bytes": FILE_MAX_BYTES,
            "batch_line_max_bytes": LINE_MAX_BYTES,
            "batch_scan_interval_s": 0.5,
            "batch_line_timeout_s": BATCH_DEADLINE_S,
        }
    )
    running = await start_server(keyed)
    lines = None
    try:
        target = f"127.0.0.1:{running.port}"
        lines = await start_batch_lines(keyed, target, running)
        assert lines is not None
        app = create_app(
            target,
            max_message_bytes=MAX_MESSAGE_BYTES,
            api_keys=load_api_keys(keyed.api_key_value(), keys_file),
            wrap_channel=running.in_process.channel,
        )
        async with serve_with_uvicorn(app) as url:
            yield url
    finally:
        await running.stop(grace=1.0)
        if lines is not None:
            await lines.close()


@pytest.fixture(scope="module")
async def team_a(urls) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(base_url=f"{urls}/v1", api_key=KEYS["team-a"], max_retries=0) as client:
        yield client


@pytest.fixture(scope="module")
async def team_b(urls) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(base_url=f"{urls}/v1", api_key=KEYS["team-b"], max_retries=0) as client:
        yield client


def jsonl(url: str, bodies: dict[str, dict[str, Any]]) -> bytes:
    """A batch input file: one line per ``custom_id: body``, all to ``url``."""
    lines = [{"custom_id": cid, "method": "POST", "url": url, "body": body} for cid, body in bodies.items()]
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


async def finished(client: openai.AsyncOpenAI, batch_id: str) -> openai.types.Batch:
    """The batch once it ended (completed, failed, expired or cancelled)."""
    async with asyncio.timeout(BATCH_DEADLINE_S):
        while True:
            batch = await client.batches.retrieve(batch_id)
            if batch.status in ("completed", "failed", "expired", "cancelled"):
                return batch
            await asyncio.sleep(0.2)


async def run_batch(
    client: openai.AsyncOpenAI, url: str, bodies: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """Upload, run and read a batch: its output lines by custom_id (the error file must be absent)."""
    file = await client.files.create(
        file=(f"{url.strip('/').replace('/', '-')}.jsonl", jsonl(url, bodies)), purpose="batch"
    )
    created = await client.batches.create(input_file_id=file.id, endpoint=url, completion_window="24h")
    batch = await finished(client, created.id)
    assert batch.status == "completed", batch
    assert batch.request_counts.total == len(bodies) == batch.request_counts.completed, batch.request_counts
    assert batch.error_file_id is None and batch.output_file_id is not None
    output = await client.files.retrieve(batch.output_file_id)
    assert output.purpose == "batch_output"
    content = (await client.files.content(batch.output_file_id)).content
    by_id: dict[str, Any] = {}
    for line in content.decode().splitlines():
        record = json.loads(line)
        assert record["custom_id"] not in by_id, "each custom_id once"
        assert record["error"] is None and record["response"]["status_code"] == 200, record
        assert record["id"].startswith("batch_req_") and record["response"]["request_id"]
        by_id[record["custom_id"]] = record["response"]["body"]
    assert set(by_id) == set(bodies)
    return by_id


async def live(client: openai.AsyncOpenAI, url: str, body: dict[str, Any]) -> Any:
    """The same request as a live call (the SDK's raw POST), for comparison."""
    return await client.post(url.removeprefix("/v1"), body=body, cast_to=object)


CHAT = {
    f"chat-{i}": {
        "model": CHAT_MODEL,
        "messages": [{"role": "user", "content": question}],
        "max_tokens": 6,
        "temperature": 0,
    }
    for i, question in enumerate(["Name a colour.", "Name a fruit."])
}
COMPLETIONS = {
    "complete-0": {
        "model": CHAT_MODEL,
        "prompt": "The capital of France is",
        "max_tokens": 4,
        "temperature": 0,
    }
}
EMBEDDINGS = {
    f"embed-{i}": {"model": EMBED_MODEL, "input": text} for i, text in enumerate(["a cat", "a stock market"])
}
RERANK = {
    "rerank-0": {
        "model": RERANK_MODEL,
        "query": "How do I reset my password?",
        "documents": ["The tide is high.", "Reset your password from the login page."],
    }
}
CLASSIFY = {
    "classify-0": {
        "model": DOCUMENT_EMBED_MODEL,
        "input": "The invoice total is 42 euros, due next week.",
        "candidate_labels": ["invoice", "weather report"],
    }
}


def ocr_lines() -> dict[str, dict[str, Any]]:
    page = base64.b64encode(render_lines(["Batch OCR works"]).png()).decode()
    return {"ocr-0": {"model": "rapidocr", "file": page, "mime_type": "image/png"}}


async def test_a_batch_on_every_endpoint_answers_as_live_calls(team_a):
    """One batch per endpoint, run together; each line's body equals the same live call's."""
    batches = {
        "/v1/chat/completions": CHAT,
        "/v1/completions": COMPLETIONS,
        "/v1/embeddings": EMBEDDINGS,
        "/v1/rerank": RERANK,
        "/v1/classify": CLASSIFY,
        "/v1/ocr": ocr_lines(),
    }
    outputs = dict(
        zip(
            batches,
            await asyncio.gather(*(run_batch(team_a, url, bodies) for url, bodies in batches.items())),
            strict=True,
        )
    )
    for cid, body in CHAT.items():
        answer = outputs["/v1/chat/completions"][cid]
        expected = await live(team_a, "/v1/chat/completions", body)
        assert answer["choices"][0]["message"]["content"] == expected["choices"][0]["message"]["content"]
        assert 0 < answer["usage"]["completion_tokens"] <= 6
    expected = await live(team_a, "/v1/completions", COMPLETIONS["complete-0"])
    assert outputs["/v1/completions"]["complete-0"]["choices"][0]["text"] == expected["choices"][0]["text"]
    for cid, body in EMBEDDINGS.items():
        vector = np.array(outputs["/v1/embeddings"][cid]["data"][0]["embedding"])
        direct = np.array((await live(team_a, "/v1/embeddings", body))["data"][0]["embedding"])
        assert vector.shape == (384,) and np.allclose(vector, direct, atol=1e-5)
    ranked = outputs["/v1/rerank"]["rerank-0"]["results"]
    assert ranked[0]["index"] == 1, ranked  # the password document first
    labels = outputs["/v1/classify"]["classify-0"]["data"][0]
    assert labels["label"] == "invoice", labels
    text = outputs["/v1/ocr"]["ocr-0"]["text"]
    assert "batch ocr works" in text.lower(), text
    assert text == (await live(team_a, "/v1/ocr", ocr_lines()["ocr-0"]))["text"]


async def test_files_and_batches_are_the_keys_own(team_a, team_b):
    file = await team_a.files.create(
        file=("mine.jsonl", jsonl("/v1/embeddings", EMBEDDINGS)), purpose="batch"
    )
    batch = await team_a.batches.create(
        input_file_id=file.id, endpoint="/v1/embeddings", completion_window="24h"
    )
    for call in (
        team_b.files.retrieve(file.id),
        team_b.files.content(file.id),
        team_b.files.delete(file.id),
        team_b.batches.retrieve(batch.id),
        team_b.batches.cancel(batch.id),
        team_b.batches.create(input_file_id=file.id, endpoint="/v1/embeddings", completion_window="24h"),
    ):
        with pytest.raises(openai.NotFoundError):
            await call
    assert file.id not in [f.id async for f in team_b.files.list()]
    assert batch.id not in [b.id async for b in team_b.batches.list()]
    assert batch.id in [b.id async for b in team_a.batches.list()]
    assert (await finished(team_a, batch.id)).status == "completed"


@pytest.mark.parametrize(
    ("content", "line", "words"),
    [
        (jsonl("/v1/embeddings", EMBEDDINGS) + b"{not json\n", 3, "json"),
        (jsonl("/v1/embeddings", {"same": EMBEDDINGS["embed-0"]}) * 2, 2, "custom_id"),
        (jsonl("/v1/embeddings", EMBEDDINGS) + jsonl("/v1/batches", {"x": {}}), 3, "url"),
        (jsonl("/v1/embeddings", {"big": {"model": EMBED_MODEL, "input": "x" * LINE_MAX_BYTES}}), 1, "bytes"),
    ],
    ids=["malformed", "duplicate-custom-id", "wrong-url", "line-over-size"],
)
async def test_bad_files_are_400_naming_the_line(team_a, content, line, words):
    with pytest.raises(openai.BadRequestError) as caught:
        await team_a.files.create(file=("bad.jsonl", content), purpose="batch")
    message = caught.value.message.lower()
    assert f"line {line}" in message and words in message, message


async def test_a_file_over_the_size_limit_is_400(team_a):
    content = jsonl(
        "/v1/embeddings", {f"id-{i}": {"model": EMBED_MODEL, "input": "x" * 1000} for i in range(300)}
    )
    assert len(content) > FILE_MAX_BYTES
    with pytest.raises(openai.BadRequestError) as caught:
        await team_a.files.create(file=("big.jsonl", content), purpose="batch")
    assert caught.value.code == "batch_file_too_large", caught.value.message


async def test_a_batch_whose_lines_name_another_endpoint_fails_with_their_lines(team_a):
    file = await team_a.files.create(
        file=("chat.jsonl", jsonl("/v1/chat/completions", CHAT)), purpose="batch"
    )
    created = await team_a.batches.create(
        input_file_id=file.id, endpoint="/v1/embeddings", completion_window="24h"
    )
    batch = await finished(team_a, created.id)
    assert batch.status == "failed" and batch.errors is not None
    assert [error.line for error in batch.errors.data] == [1, 2]
    assert {error.code for error in batch.errors.data} == {"invalid_url"}


async def test_cancel_through_the_sdk(team_a):
    many = {f"chat-{i}": {**CHAT["chat-0"], "max_tokens": 16} for i in range(24)}
    file = await team_a.files.create(
        file=("many.jsonl", jsonl("/v1/chat/completions", many)), purpose="batch"
    )
    created = await team_a.batches.create(
        input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    cancelling = await team_a.batches.cancel(created.id)
    assert cancelling.status in ("cancelling", "cancelled") and cancelling.cancelling_at is not None
    batch = await finished(team_a, created.id)
    assert batch.status == "cancelled" and batch.cancelled_at is not None
    counts = batch.request_counts
    assert counts.total == 24 and counts.completed < 24
    # Every line is in one of the two files, once: what ran in the output, the rest as cancelled.
    seen: list[str] = []
    for file_id in (batch.output_file_id, batch.error_file_id):
        if file_id is not None:
            seen += [
                json.loads(line)["custom_id"]
                for line in (await team_a.files.content(file_id)).text.splitlines()
            ]
    assert sorted(seen) == sorted(many)
    with pytest.raises(openai.BadRequestError):
        await team_a.batches.cancel((await run_finished_batch(team_a)).id)


async def run_finished_batch(client: openai.AsyncOpenAI) -> openai.types.Batch:
    file = await client.files.create(file=("one.jsonl", jsonl("/v1/embeddings", EMBEDDINGS)), purpose="batch")
    created = await client.batches.create(
        input_file_id=file.id, endpoint="/v1/embeddings", completion_window="24h"
    )
    return await finished(client, created.id)


def batch_waits(model: str) -> float:
    """Items of ``model`` served from its fair queue at batch priority, so far (any key)."""
    from prometheus_client import REGISTRY

    value = REGISTRY.get_sample_value(
        "ur_queue_wait_seconds_count", {"model": model, "key": "", "priority": "batch"}
    )
    return value or 0.0


async def test_lines_run_at_batch_priority(team_a):
    before = batch_waits(EMBED_MODEL)
    await live(team_a, "/v1/embeddings", EMBEDDINGS["embed-0"])
    assert batch_waits(EMBED_MODEL) == before  # a live call is interactive
    await run_batch(team_a, "/v1/embeddings", EMBEDDINGS)
    assert batch_waits(EMBED_MODEL) >= before + len(EMBEDDINGS)
