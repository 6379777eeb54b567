"""Keys of the converted copies (engines/converted_cache.py): what changes them, what does not.

Found by `make image-test`: the image's build made MiniLM's OpenVINO export, and the server in the
container exported it again at the first load, because the key held the weights' mtimes in
nanoseconds and image layers keep whole seconds.
"""

from __future__ import annotations

import os

from engines.converted_cache import source_fingerprint

NS = 1_000_000_000


def test_a_copy_that_keeps_whole_seconds_has_the_same_key(tmp_path):
    weights = tmp_path / "model" / "weights.bin"
    weights.parent.mkdir()
    weights.write_bytes(b"w" * 100)
    os.utime(weights, ns=(1_700_000_000 * NS + 123_456_789, 1_700_000_000 * NS + 987_654_321))
    built = source_fingerprint(weights.parent)
    os.utime(weights, ns=(1_700_000_000 * NS, 1_700_000_000 * NS))  # what an image layer keeps
    assert source_fingerprint(weights.parent) == built


def test_new_weights_change_the_key(tmp_path):
    weights = tmp_path / "weights.gguf"
    weights.write_bytes(b"w" * 100)
    os.utime(weights, ns=(1_700_000_000 * NS, 1_700_000_000 * NS))
    first = source_fingerprint(weights)
    os.utime(weights, ns=(1_700_000_001 * NS, 1_700_000_001 * NS))  # replaced a second later
    second = source_fingerprint(weights)
    weights.write_bytes(b"w" * 101)
    os.utime(weights, ns=(1_700_000_001 * NS, 1_700_000_001 * NS))  # same second, other size
    third = source_fingerprint(weights)
    assert len({first, second, third}) == 3
