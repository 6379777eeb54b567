"""The state store (engines/state_store.py) on a local folder and on S3 (moto), and the stores over it."""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from engines.anomaly.detector import fit_detector
from engines.anomaly.store import DetectorNotFoundError, DetectorStore
from engines.anomaly.types import AnomalyBackend, FitConfig
from engines.classification.custom import ClassifierStore
from engines.classification.heads import fit_logistic_head
from engines.encoder_types import ClassifierInfo
from engines.errors import FailedPreconditionError, UnavailableError
from engines.state_store import (
    FsspecStateStore,
    LocalStateStore,
    StateStore,
    display_url,
    open_state_store,
    publish_version,
)
from tests.moto_s3 import moto_s3
from tests.service.anomaly.helpers import numeric_data

ROWS = [list(map(float, r)) for r in numeric_data()[:120]]


@pytest.fixture(scope="module")
def s3():
    with moto_s3() as (_, options):
        yield options


@pytest.fixture(params=["local", "s3"])
def make_store(request, tmp_path, s3):
    """A factory of stores over one fresh root: each call is another replica's view of it."""
    prefix = uuid.uuid4().hex
    if request.param == "local":
        return lambda: open_state_store(tmp_path / prefix)
    return lambda: open_state_store(f"s3://state/{prefix}", s3, timeout_s=5.0)


def test_open_state_store_picks_the_backend(tmp_path, s3):
    assert isinstance(open_state_store(tmp_path), LocalStateStore)
    assert isinstance(open_state_store(f"file://{tmp_path}"), LocalStateStore)
    assert isinstance(open_state_store("s3://state/p", s3), FsspecStateStore)
    with pytest.raises(ValueError, match="UR_STATE_URL nosuchprotocol"):
        open_state_store("nosuchprotocol://x/y")


def test_display_url_drops_credentials():
    assert display_url("s3://AKIA:s3cr3t@bucket/prefix?token=x") == "s3://bucket/prefix"
    assert display_url("/var/lib/ur") == "/var/lib/ur"


def test_create_is_exclusive_and_swap_compares(make_store):
    store: StateStore = make_store()
    assert store.read("a/x") is None and store.read_tagged("a/x") is None
    assert store.create("a/x", b"one")
    assert not store.create("a/x", b"two")  # never overwrites
    assert store.read("a/x") == b"one"

    assert store.swap("a/m", b"m1", None)  # absent: created
    assert not store.swap("a/m", b"m2", None)  # exists now
    first = store.read_tagged("a/m")
    assert store.swap("a/m", b"m3", first)
    assert not store.swap("a/m", b"m4", first)  # stale tag
    assert store.read("a/m") == b"m3"
    latest = store.read_tagged("a/m")
    store.delete("a/m")
    assert not store.swap("a/m", b"m5", latest)  # deleted since it was read
    assert store.read("a/m") is None
    assert store.sizes() == {"a/x": 3} and store.sizes("a") == {"a/x": 3} and store.sizes("b") == {}
    store.delete("a/x")
    store.delete("a/x")  # absent: nothing
    assert store.sizes() == {}


def _listing_manifest(current, version):
    """A manifest listing every version published (the test's own, not a store's format)."""
    versions = json.loads(current.data)["versions"] if current else []
    return json.dumps({"versions": [*versions, version]}).encode()


def _next_version(current):
    return json.loads(current.data)["versions"][-1] + 1 if current else 1


def _publish(store, data: bytes) -> int:
    version_key = "v{}".format
    return publish_version(
        store, "m.json", version_key, data, first_version=_next_version, manifest=_listing_manifest
    )[0]


def test_a_crashed_writers_files_are_stepped_over_then_deleted(make_store):
    store = make_store()
    assert _publish(store, b"first") == 1
    # A writer created v2 and v3, then died before writing the manifest.
    assert store.create("v2", b"orphan") and store.create("v3", b"orphan")
    assert _publish(store, b"second") == 4
    assert json.loads(store.read("m.json"))["versions"] == [1, 4]
    assert set(store.sizes()) == {"m.json", "v1", "v4"}
    assert store.read("v4") == b"second"


def test_large_files_go_up_in_parts_and_stay_exclusive(s3):
    """s3fs sends a file of two chunks or more (100 MB at its default 50 MB) as a multipart
    upload and checks If-None-Match on its completion; here with 5 MiB chunks (S3's smallest
    part), so the create of a large version is as exclusive as a small one's."""
    store = open_state_store(f"s3://state/{uuid.uuid4().hex}", s3, timeout_s=30.0)
    path, chunk = store._path("big"), 5 * 2**20
    store.fs.pipe_file(path, b"a" * (2 * chunk + 1), chunksize=chunk, mode="create")
    with pytest.raises(FileExistsError):
        store.fs.pipe_file(path, b"b" * (2 * chunk + 1), chunksize=chunk, mode="create")
    assert store.read("big")[:1] == b"a"


def test_racing_publishers_leave_one_consistent_latest_version(make_store):
    """Three writers publish 4 versions each at once: every publish lands once, in order, and only
    files the manifest names are left."""
    store = make_store()

    def writer(n: int) -> list[int]:
        replica = make_store()  # its own client, as another server would have
        return [_publish(replica, f"w{n}-{i}".encode()) for i in range(4)]

    with ThreadPoolExecutor(3) as pool:
        published = [v for vs in pool.map(writer, range(3)) for v in vs]
    assert len(set(published)) == 12  # no version published twice
    versions = json.loads(store.read("m.json"))["versions"]
    assert versions == sorted(versions) and set(versions) == set(published)
    assert set(store.sizes()) == {"m.json", *(f"v{v}" for v in versions)}  # losers' files deleted


def _detector(seed: int = 0):
    rows = [list(map(float, r)) for r in numeric_data(seed)[:120]]
    return fit_detector(rows, FitConfig(backend=AnomalyBackend.HBOS, contamination=0.1))


def test_detector_store_replicas_see_fits_refits_and_deletes(make_store):
    a, b = DetectorStore(make_store()), DetectorStore(make_store())
    first, second = _detector(0), _detector(1)
    assert a.save("d", first) == 1
    version, loaded = b.load("d")
    assert version == 1
    np.testing.assert_array_equal(loaded.score(ROWS).raw, first.score(ROWS).raw)
    assert a.save("d", second) == 2
    version, loaded = b.load("d")  # B's cache holds version 1: the manifest says 2
    assert version == 2
    np.testing.assert_array_equal(loaded.score(ROWS).raw, second.score(ROWS).raw)
    assert [d.version for d in b.list()] == [2]
    assert b.delete("d") == 2
    with pytest.raises(DetectorNotFoundError):
        a.load("d")  # A cached it; the store says it is gone
    # Refit after a delete starts again at 1, and B does not serve its cached detector for it.
    assert a.save("d", first) == 1
    np.testing.assert_array_equal(b.load("d")[1].score(ROWS).raw, first.score(ROWS).raw)


def test_detector_store_cache_ttl_skips_the_manifest(make_store):
    a, b = DetectorStore(make_store()), DetectorStore(make_store(), cache_ttl_s=60)
    a.save("d", _detector(0))
    assert b.load("d")[0] == 1
    a.save("d", _detector(1))
    assert b.load("d")[0] == 1  # served from the cache for cache_ttl_s
    assert DetectorStore(make_store()).load("d")[0] == 2


def test_detector_store_concurrent_saves_from_two_replicas(make_store):
    stores = [DetectorStore(make_store(), keep_versions=2) for _ in range(2)]
    detector = _detector(0)
    with ThreadPoolExecutor(2) as pool:
        versions = list(pool.map(lambda i: [stores[i % 2].save("d", detector) for _ in range(3)], range(2)))
    flat = sorted(v for vs in versions for v in vs)
    assert len(set(flat)) == 6 and all(vs == sorted(vs) for vs in versions)  # a number may be skipped
    for store in stores:
        assert store.load("d")[0] == flat[-1]
    kept = sorted(DetectorStore(make_store()).store.sizes("d"))
    assert kept == ["d/manifest.json", *sorted(f"d/v{v}.skops" for v in flat[-2:])]


def _head(labels):
    vectors = np.eye(4, dtype=np.float32)[[0, 1, 2, 3, 0, 1]]
    return fit_logistic_head(vectors, labels)[0]


def _info(labels) -> ClassifierInfo:
    return ClassifierInfo("c", "m", sorted(set(labels)), 6, 0, 1.0)


def test_classifier_store_replicas_see_saves_replacements_and_deletes(make_store):
    a, b = ClassifierStore(make_store()), ClassifierStore(make_store())
    one, two = ["a", "b", "c", "d", "a", "b"], ["x", "y", "x", "y", "x", "y"]
    assert b.get("c") is None
    a.save(_info(one), _head(one))
    assert b.get("c").labels == ["a", "b", "c", "d"]
    with pytest.raises(FailedPreconditionError) as caught:
        b.save(_info(two), _head(two), overwrite=False)
    assert caught.value.reason == "CLASSIFIER_EXISTS"
    b.save(_info(two), _head(two))
    assert a.get("c").labels == ["x", "y"]  # A's cached head is replaced
    assert sorted(a.store.sizes()) == ["c.json", "c.v2.skops"]
    assert [i.name for i in a.list()] == ["c"]
    assert b.delete("c").labels == ["x", "y"]
    assert a.get("c") is None and a.store.sizes() == {}


def test_classifier_store_reads_files_saved_before_versions(tmp_path):
    store = ClassifierStore(tmp_path)
    labels = ["a", "b", "c", "d", "a", "b"]
    store.save(_info(labels), _head(labels))
    (tmp_path / "c.v1.skops").rename(tmp_path / "c.skops")  # the old layout: no version, no checksum
    legacy = {
        k: v
        for k, v in json.loads((tmp_path / "c.json").read_text()).items()
        if k not in ("version", "sha256")
    }
    (tmp_path / "c.json").write_text(json.dumps(legacy))
    assert ClassifierStore(tmp_path).get("c").labels == ["a", "b", "c", "d"]
    store.save(_info(labels), _head(labels))  # the next save moves it to the new layout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.json", "c.v1.skops"]


def test_unreachable_store_is_unavailable_quickly():
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # bound, never listening: connections are refused
        options = {"endpoint_url": f"http://127.0.0.1:{port}", "key": "AKIDSECRETID", "secret": "s3cr3t"}
        store = DetectorStore(open_state_store("s3://state/down", options, timeout_s=3.0).child("anomaly"))
        started = time.monotonic()
        with pytest.raises(UnavailableError) as caught:
            store.load("d")
    assert time.monotonic() - started < 6
    error = caught.value
    assert error.status == "UNAVAILABLE" and error.reason == "STATE_STORE_UNAVAILABLE"
    assert (
        "s3://state/down/anomaly" in error.message
        and error.metadata["state_url"] == "s3://state/down/anomaly"
    )
    assert "s3cr3t" not in error.message and "AKIDSECRETID" not in error.message


def test_store_that_never_answers_is_bounded_by_the_timeout():
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)  # connections complete in the kernel's backlog; nothing ever answers
        port = silent.getsockname()[1]
        options = {"endpoint_url": f"http://127.0.0.1:{port}", "key": "k", "secret": "s"}
        store = open_state_store("s3://state/silent", options, timeout_s=1.5)
        started = time.monotonic()
        with pytest.raises(UnavailableError) as caught:
            store.read("x")
        elapsed = time.monotonic() - started
    assert elapsed < 5, elapsed
    assert caught.value.reason == "STATE_STORE_UNAVAILABLE"


def test_local_store_errors_are_unavailable_too(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    store = LocalStateStore(tmp_path / "file")
    with pytest.raises(UnavailableError) as caught:
        store.create("k", b"x")
    assert caught.value.reason == "STATE_STORE_UNAVAILABLE"


def test_local_swaps_from_threads_never_interleave(tmp_path):
    store = LocalStateStore(tmp_path)
    store.swap("n", b"0", None)
    wins = []

    def bump():
        for _ in range(50):
            while True:
                current = store.read_tagged("n")
                if store.swap("n", str(int(current.data) + 1).encode(), current):
                    wins.append(1)
                    break

    threads = [threading.Thread(target=bump) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.read("n") == b"200" and len(wins) == 200
