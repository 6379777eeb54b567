"""Parity details clients check (issue 31, item 4): id prefixes, timestamps and fingerprints.

The shapes come from the APIs' own objects: OpenAI Chat Completions (``chatcmpl-``), legacy
Completions (``cmpl-``), Responses (``resp_``, ``msg_``, ``fc_``, ``rs_``, ``call_``), Anthropic
Messages (``msg_``, ``toolu_``); ``system_fingerprint`` is ``fp_`` and hex.
"""

from __future__ import annotations

import re
import time

import pytest

from gateway import ids

SERVER_HEX = "0123456789abcdef0123456789abcdef"


@pytest.mark.parametrize(
    ("make", "pattern"),
    [
        (ids.chat_completion_id, r"chatcmpl-[0-9a-f]{32}"),
        (ids.completion_id, r"cmpl-[0-9a-f]{32}"),
        (ids.response_id, r"resp_[0-9a-f]{48}"),
        (ids.message_id, r"msg_[0-9a-f]{48}"),
        (ids.function_call_id, r"fc_[0-9a-f]{48}"),
        (ids.reasoning_id, r"rs_[0-9a-f]{48}"),
        (ids.tool_call_id, r"call_[0-9a-f]{24}"),
        (ids.tool_use_id, r"toolu_[0-9A-Za-z]{24}"),
    ],
)
def test_fresh_ids_have_the_apis_prefix_and_differ(make, pattern):
    first, second = make(), make()
    assert re.fullmatch(pattern, first), first
    assert re.fullmatch(pattern, second), second
    assert first != second


def test_completion_ids_keep_the_server_ids_hex_part():
    assert ids.chat_completion_id(f"gen-{SERVER_HEX}") == f"chatcmpl-{SERVER_HEX}"
    assert ids.completion_id(f"gen-{SERVER_HEX}") == f"cmpl-{SERVER_HEX}"


def test_unix_now_is_whole_seconds():
    before = int(time.time())
    now = ids.unix_now()
    assert isinstance(now, int) and before <= now <= int(time.time())


def test_system_fingerprint_is_stable_per_model_and_runtime_version():
    first = ids.system_fingerprint("smollm2-135m")
    assert re.fullmatch(r"fp_[0-9a-f]{10}", first)
    assert ids.system_fingerprint("smollm2-135m") == first
    assert ids.system_fingerprint("another-model") != first
    assert ids.runtime_version() != ""
