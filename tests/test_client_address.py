"""The fair-share caller of a process-lane job: the key's name with keys, else peer and client address."""

from __future__ import annotations

import contextvars

from engines.process_lane import caller_var
from service.request_context import api_key_name_var
from service.shared.client_address import (
    CLIENT_ADDRESS_METADATA_KEY,
    MAX_CLIENT_ADDRESS_CHARS,
    client_address,
    clip_address,
)
from service.tasks.callers import note_caller


def _caller(key_name: str, peer: str, address: str) -> str:
    def note() -> str:
        api_key_name_var.set(key_name)
        note_caller(peer, address)
        return caller_var.get()

    return contextvars.copy_context().run(note)


def test_without_keys_the_address_splits_the_gateways_peer():
    assert _caller("", "in-process", "10.0.0.1") == "in-process 10.0.0.1"
    assert _caller("", "in-process", "10.0.0.2") != _caller("", "in-process", "10.0.0.1")
    assert _caller("", "ipv4:127.0.0.1:5000", "") == "ipv4:127.0.0.1:5000"  # a direct gRPC client


def test_a_forged_address_never_joins_another_peers_turns():
    # A direct client naming the gateway's client's address stays within its own connection.
    assert _caller("", "ipv4:127.0.0.1:5000", "10.0.0.1") != _caller("", "in-process", "10.0.0.1")
    assert _caller("", "ipv4:127.0.0.1:5000", "in-process") != "in-process"


def test_with_keys_the_key_name_is_the_caller_whatever_the_address():
    assert _caller("team-a", "in-process", "10.0.0.1") == "team-a"
    assert _caller("team-a", "in-process", "10.0.0.2") == "team-a"


def test_the_address_in_metadata_is_bounded_and_printable():
    long = "1" * 10_000
    assert client_address([(CLIENT_ADDRESS_METADATA_KEY, long)]) == "1" * MAX_CLIENT_ADDRESS_CHARS
    assert client_address([("x-request-id", "r"), (CLIENT_ADDRESS_METADATA_KEY, "::1")]) == "::1"
    assert client_address([(CLIENT_ADDRESS_METADATA_KEY, "a"), (CLIENT_ADDRESS_METADATA_KEY, "b")]) == "a"
    assert client_address([(CLIENT_ADDRESS_METADATA_KEY, b"10.0.0.1")]) == ""  # only text values
    assert client_address([]) == ""
    assert clip_address("10.0.0.1\n\x7f\u00e9") == "10.0.0.1"
