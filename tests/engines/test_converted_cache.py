"""Keys of the converted copies (engines/converted_cache.py): what changes them, what does not;
and what bounds the cache: a build removes the copies it supersedes.

The key holds the files' content, not their modification times, which image layers and copies
do not keep (see docs/architecture/design-notes.md#converted-copies-keyed-by-content).
"""

from __future__ import annotations

import os

from engines.converted_cache import (
    FINGERPRINT_SAMPLE_BYTES,
    IDENTITY_FILE,
    IN_USE_GRACE_S,
    build_once,
    source_fingerprint,
)
from engines.generation.requantize import requantized

NS = 1_000_000_000


def test_a_copy_of_the_weights_with_other_times_has_the_same_key(tmp_path):
    weights = tmp_path / "model" / "weights.bin"
    weights.parent.mkdir()
    weights.write_bytes(b"w" * 100)
    os.utime(weights, ns=(1_700_000_000 * NS + 700_000_000, 1_700_000_000 * NS + 700_000_000))
    built = source_fingerprint(weights.parent)
    for seconds in (1_700_000_000, 1_700_000_001, 1_800_000_000):  # truncated, rounded, reinstalled
        os.utime(weights, ns=(seconds * NS, seconds * NS))
        assert source_fingerprint(weights.parent) == built


def test_new_weights_change_the_key(tmp_path):
    weights = tmp_path / "weights.gguf"
    weights.write_bytes(b"w" * 100)
    first = source_fingerprint(weights)
    weights.write_bytes(b"v" * 100)  # same size, other content
    second = source_fingerprint(weights)
    weights.write_bytes(b"w" * 101)  # other size
    third = source_fingerprint(weights)
    assert len({first, second, third}) == 3


def test_a_large_file_is_read_at_its_start_middle_and_end(tmp_path):
    weights = tmp_path / "weights.safetensors"
    size = 4 * FINGERPRINT_SAMPLE_BYTES
    content = bytearray(size)
    weights.write_bytes(content)
    keys = {source_fingerprint(weights)}
    for offset in (10, size // 2, size - 10):  # a byte in each sample
        changed = bytearray(content)
        changed[offset] = 1
        weights.write_bytes(changed)
        keys.add(source_fingerprint(weights))
    assert len(keys) == 4


# What bounds the cache: a build removes the copies it supersedes (same identity, not in use).


def _write(content: str):
    def build(folder):
        (folder / "weights").write_text(content)

    return build


def _age(folder, seconds):
    old = folder.stat().st_mtime - seconds
    os.utime(folder, (old, old))


def test_a_new_copy_removes_the_superseded_one_of_the_same_identity(tmp_path):
    first, second = tmp_path / "model-onnx-aaaa", tmp_path / "model-onnx-bbbb"
    assert build_once(first, _write("v1"), identity="/models/minilm|onnx")
    _age(first, IN_USE_GRACE_S + 1)
    assert build_once(second, _write("v2"), identity="/models/minilm|onnx")
    assert not first.exists() and not (tmp_path / f".{first.name}.lock").exists()
    assert (second / "weights").read_text() == "v2"
    assert (second / IDENTITY_FILE).read_text() == "/models/minilm|onnx"


def test_other_identities_and_copies_in_use_stay(tmp_path):
    other = tmp_path / "model-onnx-aaaa"  # another model whose export has the same file name
    in_use = tmp_path / "model-onnx-cccc"
    legacy = tmp_path / "model-onnx-dddd"  # made before identities were recorded
    assert build_once(other, _write("other"), identity="/models/bge|onnx")
    assert build_once(in_use, _write("v1"), identity="/models/minilm|onnx")
    legacy.mkdir()
    for folder in (other, legacy):
        _age(folder, IN_USE_GRACE_S + 1)
    _age(in_use, IN_USE_GRACE_S - 60)  # used nine minutes ago: a load may still be reading it
    assert build_once(tmp_path / "model-onnx-eeee", _write("v2"), identity="/models/minilm|onnx")
    assert other.is_dir() and in_use.is_dir() and legacy.is_dir()


def test_finding_a_copy_marks_it_used(tmp_path):
    copy = tmp_path / "model-onnx-aaaa"
    assert build_once(copy, _write("v1"), identity="/models/minilm|onnx")
    _age(copy, IN_USE_GRACE_S + 1)
    assert not build_once(copy, _write("unused"), identity="/models/minilm|onnx")
    assert build_once(tmp_path / "model-onnx-bbbb", _write("v2"), identity="/models/minilm|onnx")
    assert copy.is_dir()  # found just now, so in use


def test_requantizing_new_weights_at_the_same_path_replaces_the_old_copy(tmp_path):
    source = tmp_path / "models" / "tiny.gguf"
    source.parent.mkdir()
    cache = tmp_path / "cache"

    def quantizer(src, target, ftype):
        target.write_bytes(src.read_bytes()[:4])

    source.write_bytes(b"old weights")
    os.utime(source, ns=(1_700_000_000 * NS, 1_700_000_000 * NS))
    old = requantized(source, "q8_0", cache, quantizer)
    _age(old.parent, IN_USE_GRACE_S + 1)
    source.write_bytes(b"new weights!")  # an upgrade in place: same path, other size and time
    new = requantized(source, "q8_0", cache, quantizer)
    assert new != old and new.read_bytes() == b"new "
    assert [p.name for p in cache.iterdir() if not p.name.startswith(".")] == [new.parent.name]
