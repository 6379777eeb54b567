"""The batch store: input files checked line by line, per-key isolation, batches, pagination, leases."""

from __future__ import annotations

from dataclasses import replace

import pytest

from engines.errors import FailedPreconditionError, InvalidArgumentError, ResourceExhaustedError
from service.batches.files import FileInfo, FileNotFoundInStoreError
from service.batches.lines import InputLimits, parse_input
from service.batches.records import CANCELLING, COMPLETED, VALIDATING, BatchJobNotFoundError
from service.batches.store import StoreLimits
from tests.service.batches.helpers import LIMITS, jsonl, line, make_store


def refusal(data: bytes, limits: InputLimits = LIMITS.input) -> InvalidArgumentError:
    with pytest.raises(InvalidArgumentError) as caught:
        parse_input(data, limits)
    return caught.value


@pytest.mark.parametrize(
    ("bad", "problem"),
    [
        ('{"custom_id": "b", "method": "POST", "url": "/v1/embeddings", "body": {}', "not valid JSON"),
        ('["a", "list"]', "must be a JSON object, not list"),
        ({"method": "POST", "url": "/v1/embeddings", "body": {}}, "'custom_id' is missing"),
        (
            {"custom_id": 7, "method": "POST", "url": "/v1/embeddings", "body": {}},
            "'custom_id' must be a string",
        ),
        (
            {"custom_id": "", "method": "POST", "url": "/v1/embeddings", "body": {}},
            "must be 1 to 512 characters",
        ),
        ({"custom_id": "x" * 513, "method": "POST", "url": "/v1/embeddings", "body": {}}, "not 513"),
        ({"custom_id": "b", "method": "GET", "url": "/v1/embeddings", "body": {}}, "'method' must be 'POST'"),
        (
            {"custom_id": "b", "method": "POST", "url": "/v1/models", "body": {}},
            "'/v1/models' is not supported",
        ),
        ({"custom_id": "b", "method": "POST", "url": "/v1/embeddings"}, "'body' is missing"),
        (
            {"custom_id": "b", "method": "POST", "url": "/v1/embeddings", "body": "text"},
            "must be a JSON object",
        ),
        (line("a"), "custom_id 'a' is already used on line 1"),
        (
            {"custom_id": "b", "method": "POST", "url": "/v1/chat/completions", "body": {"stream": True}},
            "'body.stream' must not be true",
        ),
    ],
)
def test_a_bad_line_refuses_the_file_naming_its_line_number(bad, problem):
    # Line 1 is good, line 2 empty (skipped but counted), line 3 the bad one.
    error = refusal(jsonl(line("a"), "", bad, line("z")))
    assert error.reason == "INVALID_BATCH_LINE"
    assert error.metadata["line"] == "3"
    assert problem in error.metadata["problem"], error.message
    assert error.message.startswith("line 3 of the batch file: ")


def test_files_over_the_limits_or_not_jsonl_are_refused_naming_the_limit():
    too_big = refusal(b"x" * (LIMITS.input.max_bytes + 1))
    assert (too_big.reason, too_big.metadata["limit"]) == (
        "BATCH_FILE_TOO_LARGE",
        str(LIMITS.input.max_bytes),
    )
    too_many = refusal(jsonl(*(line(f"r{i}") for i in range(LIMITS.input.max_lines + 1))))
    assert too_many.reason == "BATCH_FILE_TOO_MANY_LINES"
    assert too_many.metadata == {"limit": "50", "line": "51"}
    long_line = refusal(jsonl(line("a"), line("b", input="y" * 5000)))
    assert (long_line.reason, long_line.metadata["line"]) == ("INVALID_BATCH_LINE", "2")
    assert "over 4096 bytes" in long_line.message
    not_utf8 = refusal(jsonl(line("a")) + b'{"custom_id": "\xff"}\n')
    assert (not_utf8.reason, not_utf8.metadata["line"]) == ("INVALID_BATCH_FILE", "2")
    assert refusal(b"\n \n").reason == "INVALID_BATCH_FILE"


def test_good_lines_parse_in_order_with_their_line_numbers_and_every_supported_url():
    urls = [
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/embeddings",
        "/v1/rerank",
        "/v1/classify",
        "/v1/ocr",
    ]
    urls += ["/v1/documents/analyze", "/v1/documents/ask", "/v1/documents/extract", "/v1/documents/classify"]
    data = (
        jsonl(*(line(f"id-{i}", url) for i, url in enumerate(urls[:3])))
        + b"\r\n"
        + jsonl(*(line(f"id-{i + 3}", url) for i, url in enumerate(urls[3:])))
    )
    lines = parse_input(data, LIMITS.input)
    assert [x.custom_id for x in lines] == [f"id-{i}" for i in range(10)]
    assert [x.url for x in lines] == urls
    assert [x.index for x in lines] == list(range(10))
    assert [x.line for x in lines] == [1, 2, 3, *range(5, 12)]  # line 4 is the empty one


def test_a_key_sees_only_its_own_files_and_batches(store):
    mine = store.create_file("team-a", "in.jsonl", jsonl(line("a"), line("b")))
    assert (mine.purpose, mine.line_count, mine.bytes, mine.filename) == (
        "batch",
        2,
        len(jsonl(line("a"), line("b"))),
        "in.jsonl",
    )
    batch = store.create_batch("team-a", mine.id, "/v1/embeddings", "24h", {"job": "nightly"})
    assert (batch.status, batch.total, batch.expires_at - batch.created_at) == (VALIDATING, 2, 24 * 3600)
    for call in (
        lambda: store.get_file("team-b", mine.id),
        lambda: store.file_content("team-b", mine.id),
        lambda: store.delete_file("team-b", mine.id),
        lambda: store.create_batch("team-b", mine.id, "/v1/embeddings", "24h", {}),
    ):
        with pytest.raises(FileNotFoundInStoreError):
            call()
    for call in (lambda: store.get_batch("team-b", batch.id), lambda: store.cancel_batch("team-b", batch.id)):
        with pytest.raises(BatchJobNotFoundError):
            call()
    assert store.list_files("team-b") == ([], False)
    assert store.list_batches("team-b") == ([], False)
    assert store.get_file("team-a", mine.id) == mine
    assert store.get_batch("team-a", batch.id) == batch


def test_files_list_newest_first_by_page_and_purpose_and_delete(store, clock):
    ids = []
    for i in range(5):
        clock.tick()
        ids.append(store.create_file("k", f"f{i}.jsonl", jsonl(line(f"x{i}"))).id)
    page, more = store.list_files("k", limit=2)
    assert ([f.id for f in page], more) == (ids[:2:-1][:2], True)
    page, more = store.list_files("k", after=page[-1].id, limit=2)
    assert ([f.id for f in page], more) == ([ids[2], ids[1]], True)
    page, more = store.list_files("k", after=page[-1].id, limit=2)
    assert ([f.id for f in page], more) == ([ids[0]], False)
    assert [f.id for f in store.list_files("k", newest_first=False)[0]] == ids
    assert store.list_files("k", purpose="batch_output") == ([], False)
    store.delete_file("k", ids[0])
    with pytest.raises(FileNotFoundInStoreError):
        store.get_file("k", ids[0])
    assert len(store.list_files("k")[0]) == 4
    with pytest.raises(InvalidArgumentError, match="limit must be 1 to 10000"):
        store.list_files("k", limit=10_001)
    with pytest.raises(InvalidArgumentError) as caught:
        store.get_file("k", "file-../../etc/passwd")
    assert caught.value.reason == "INVALID_FILE_ID"


def test_a_key_keeps_at_most_max_files(tmp_path, clock):
    store = make_store(tmp_path, clock, StoreLimits(LIMITS.input, max_files=2, max_batches=4))
    store.create_file("k", "a", jsonl(line("a")))
    store.create_file("k", "b", jsonl(line("a")))
    with pytest.raises(ResourceExhaustedError) as caught:
        store.create_file("k", "c", jsonl(line("a")))
    assert (caught.value.reason, caught.value.metadata["limit"]) == ("TOO_MANY_FILES", "2")
    store.create_file("other", "c", jsonl(line("a")))  # per key


def test_create_batch_checks_endpoint_window_metadata_and_the_input_files_purpose(store):
    file = store.create_file("k", "in", jsonl(line("a")))
    cases = [
        (dict(endpoint="/v1/models"), "INVALID_BATCH_ENDPOINT"),
        (dict(completion_window="1h"), "INVALID_COMPLETION_WINDOW"),
        (dict(metadata={f"k{i}": "v" for i in range(17)}), "INVALID_BATCH_METADATA"),
        (dict(metadata={"k" * 65: "v"}), "INVALID_BATCH_METADATA"),
        (dict(metadata={"k": "v" * 513}), "INVALID_BATCH_METADATA"),
        (dict(input_file_id="nope"), "INVALID_FILE_ID"),
    ]
    for change, reason in cases:
        request = {
            "input_file_id": file.id,
            "endpoint": "/v1/embeddings",
            "completion_window": "24h",
            "metadata": {},
        }
        request.update(change)
        with pytest.raises(InvalidArgumentError) as caught:
            store.create_batch("k", **request)
        assert caught.value.reason == reason, change
    # An output file is not an input.
    output = FileInfo("file-000000000000outputfile12", 3, 0, "o", "batch_output", 1)
    store.files.write("k", output, b"{}\n")
    with pytest.raises(FailedPreconditionError) as caught:
        store.create_batch("k", output.id, "/v1/embeddings", "", {})
    assert caught.value.reason == "INPUT_FILE_NOT_BATCH"


def test_cancel_moves_validating_to_cancelling_once_and_ended_batches_refuse(store, clock):
    file = store.create_file("k", "in", jsonl(line("a")))
    batch = store.create_batch("k", file.id, "/v1/embeddings", "", {})
    clock.tick(5)
    cancelled = store.cancel_batch("k", batch.id)
    assert (cancelled.status, cancelled.cancelling_at) == (CANCELLING, int(clock.now))
    clock.tick(5)
    assert store.cancel_batch("k", batch.id) == cancelled  # again: as it is
    store.update_batch("k", batch.id, lambda b: replace(b, status=COMPLETED))
    with pytest.raises(FailedPreconditionError) as caught:
        store.cancel_batch("k", batch.id)
    assert caught.value.reason == "BATCH_NOT_CANCELLABLE"


def test_a_key_over_max_batches_forgets_its_oldest_ended_batch_and_refuses_when_none_ended(store, clock):
    file = store.create_file("k", "in", jsonl(line("a")))
    batches = []
    for _ in range(LIMITS.max_batches):
        clock.tick()
        batches.append(store.create_batch("k", file.id, "/v1/embeddings", "", {}))
    with pytest.raises(ResourceExhaustedError) as caught:
        store.create_batch("k", file.id, "/v1/embeddings", "", {})
    assert caught.value.reason == "TOO_MANY_BATCHES"
    store.update_batch("k", batches[1].id, lambda b: replace(b, status=COMPLETED))
    clock.tick()
    newest = store.create_batch("k", file.id, "/v1/embeddings", "", {})
    ids = [b.id for b in store.list_batches("k")[0]]
    assert ids == [newest.id, batches[3].id, batches[2].id, batches[0].id]
    page, more = store.list_batches("k", limit=2)
    assert ([b.id for b in page], more) == (ids[:2], True)
    page, more = store.list_batches("k", after=page[-1].id, limit=2)
    assert ([b.id for b in page], more) == (ids[2:], False)


def test_a_lease_is_held_until_it_expires_then_taken_over(store, clock):
    assert store.take_lease("batch_x", "runner-1", 10.0)
    assert not store.take_lease("batch_x", "runner-2", 10.0)
    clock.tick(5)
    assert store.take_lease("batch_x", "runner-1", 10.0)  # renewed: until now + 10
    clock.tick(9)
    assert not store.take_lease("batch_x", "runner-2", 10.0)
    clock.tick(2)  # runner-1 stopped renewing: expired
    assert store.take_lease("batch_x", "runner-2", 10.0)
    assert not store.take_lease("batch_x", "runner-1", 10.0)
    store.release_lease("batch_x", "runner-1")  # not its lease: nothing happens
    assert not store.take_lease("batch_x", "runner-3", 10.0)
    store.release_lease("batch_x", "runner-2")
    assert store.take_lease("batch_x", "runner-3", 10.0)
