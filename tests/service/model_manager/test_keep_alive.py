"""Keep-alive parsing and formatting (semantics of docker/model-runner's pkg/inference/backend.go)."""

from __future__ import annotations

import math

import pytest

from engines.errors import InvalidArgumentError
from service.keep_alive import format_keep_alive, parse_keep_alive


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0.0),
        ("-1", math.inf),
        ("-5m", math.inf),
        ("30s", 30.0),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("250ms", 0.25),
        ("1.5h", 5400.0),
        ("2h45m30s", 9930.0),
    ],
)
def test_parse(text, seconds):
    assert parse_keep_alive(text) == seconds


@pytest.mark.parametrize("text", ["", "5", "5 m", "soon", "m5", "1x", "--1"])
def test_parse_rejects(text):
    with pytest.raises(InvalidArgumentError) as caught:
        parse_keep_alive(text)
    assert caught.value.reason == "INVALID_KEEP_ALIVE"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(300.0, "5m0s"), (math.inf, "-1"), (0.0, "0s"), (5400.0, "1h30m0s"), (0.25, "250ms")],
)
def test_format_like_go(seconds, text):
    assert format_keep_alive(seconds) == text
