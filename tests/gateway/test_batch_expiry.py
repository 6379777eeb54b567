"""File expiry through the OpenAI SDK, the gateway and a real server (OpenAI's ``expires_after``).

``files.create(expires_after=...)`` and ``batches.create(output_expires_after=...)`` set when a
file goes (the File object's ``expires_at``); bad values are 400 naming the field. The server is
the one of tests/gateway/test_batches_sdk.py (its fixtures, imported), with real models.
"""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.conftest import EMBED_MODEL
from tests.gateway.test_batches_sdk import KEYS, finished, jsonl, team_a, urls  # noqa: F401 (team_a, urls: fixtures)

THIRTY_DAYS = 30 * 24 * 3600
LINES = jsonl("/v1/embeddings", {f"e{i}": {"model": EMBED_MODEL, "input": f"text {i}"} for i in range(2)})


async def test_files_create_with_expires_after_answers_expires_at(team_a):  # noqa: F811
    file = await team_a.files.create(
        file=("in.jsonl", LINES), purpose="batch", expires_after={"anchor": "created_at", "seconds": 3600}
    )
    assert file.expires_at == file.created_at + 3600
    assert (await team_a.files.retrieve(file.id)).expires_at == file.expires_at
    listed = {f.id: f.expires_at async for f in team_a.files.list(purpose="batch")}
    assert listed[file.id] == file.expires_at
    default = await team_a.files.create(file=("in.jsonl", LINES), purpose="batch")
    assert default.expires_at == default.created_at + THIRTY_DAYS  # OpenAI's default for batch files


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        (
            {"expires_after[anchor]": "last_active_at", "expires_after[seconds]": "3600"},
            "expires_after.anchor",
        ),
        ({"expires_after[seconds]": "3600"}, "expires_after.anchor"),
        ({"expires_after[anchor]": "created_at"}, "expires_after.seconds"),
        (
            {"expires_after[anchor]": "created_at", "expires_after[seconds]": "an hour"},
            "expires_after.seconds",
        ),
        (
            {"expires_after[anchor]": "created_at", "expires_after[seconds]": "3600.5"},
            "expires_after.seconds",
        ),
        ({"expires_after[anchor]": "created_at", "expires_after[seconds]": "-3600"}, "expires_after.seconds"),
        ({"expires_after[anchor]": "created_at", "expires_after[seconds]": "3599"}, "expires_after.seconds"),
        (
            {"expires_after[anchor]": "created_at", "expires_after[seconds]": "2592001"},
            "expires_after.seconds",
        ),
        (
            {"expires_after[anchor]": "created_at", "expires_after[seconds]": "9" * 4000},
            "expires_after.seconds",
        ),
    ],
)
async def test_a_bad_expires_after_is_400_naming_the_field(urls, fields, param):  # noqa: F811
    async with httpx.AsyncClient(
        base_url=urls, headers={"authorization": f"Bearer {KEYS['team-a']}"}
    ) as http:
        response = await http.post(
            "/v1/files", data={"purpose": "batch", **fields}, files={"file": ("in.jsonl", LINES)}
        )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["type"], error["code"], error["param"]) == (
        "invalid_request_error",
        "invalid_expires_after",
        param,
    )


async def test_out_of_range_expiries_through_the_sdk_are_400_naming_the_field(team_a):  # noqa: F811
    with pytest.raises(openai.BadRequestError) as caught:
        await team_a.files.create(
            file=("in.jsonl", LINES), purpose="batch", expires_after={"anchor": "created_at", "seconds": 60}
        )
    assert (caught.value.code, caught.value.param) == ("invalid_expires_after", "expires_after.seconds")
    file = await team_a.files.create(file=("in.jsonl", LINES), purpose="batch")
    for bad, param in (
        ({"anchor": "created_at", "seconds": 3599}, "output_expires_after.seconds"),
        ({"anchor": "created_at", "seconds": 2_592_001}, "output_expires_after.seconds"),
        ({"anchor": "created_at"}, "output_expires_after.seconds"),
        ({"anchor": "last_active_at", "seconds": 3600}, "output_expires_after.anchor"),
    ):
        with pytest.raises(openai.BadRequestError) as caught:
            await team_a.batches.create(
                input_file_id=file.id,
                endpoint="/v1/embeddings",
                completion_window="24h",
                output_expires_after=bad,  # type: ignore[arg-type]
            )
        assert caught.value.param == param, (bad, caught.value.body)
    assert [b async for b in team_a.batches.list() if b.input_file_id == file.id] == []


async def test_batches_create_with_output_expires_after_gives_its_files_that_expiry(team_a):  # noqa: F811
    file = await team_a.files.create(file=("in.jsonl", LINES), purpose="batch")
    created = await team_a.batches.create(
        input_file_id=file.id,
        endpoint="/v1/embeddings",
        completion_window="24h",
        output_expires_after={"anchor": "created_at", "seconds": 7200},
    )
    batch = await finished(team_a, created.id)
    assert batch.status == "completed" and batch.request_counts.completed == 2, batch
    output = await team_a.files.retrieve(batch.output_file_id)
    assert output.purpose == "batch_output"
    assert output.expires_at == output.created_at + 7200  # anchored on the file's creation (OpenAI's rule)
    assert (await team_a.files.retrieve(file.id)).expires_at == file.created_at + THIRTY_DAYS


async def test_expires_after_sent_as_a_file_part_is_400_and_nothing_is_stored(urls, team_a):  # noqa: F811
    before = [f.id async for f in team_a.files.list()]
    async with httpx.AsyncClient(
        base_url=urls, headers={"authorization": f"Bearer {KEYS['team-a']}"}
    ) as http:
        response = await http.post(
            "/v1/files",
            data={"purpose": "batch", "expires_after[anchor]": "created_at"},
            files={"file": ("in.jsonl", LINES), "expires_after[seconds]": ("seconds.txt", b"3600")},
        )
    # The form takes one file part (max_files=1): a second is refused while the form is read.
    assert response.status_code == 400, response.text
    assert "Maximum number of files is 1" in response.json()["error"]["message"]
    assert [f.id async for f in team_a.files.list()] == before
