"""The fair-share lane of a call: the key's name with keys, else peer and client address.

The lane is decided by admission (the ``priority`` step, after ``authentication`` when the
server has keys) from the call's context, which the face makes from its metadata and peer; the
lane is what the process lanes' fair turns read (:attr:`engines.fair_share.Caller.lane`).
"""

from __future__ import annotations

import asyncio

from engines.fair_share import DEFAULT_CALLER, caller_var, current_caller
from service.core.admission.authentication import Authentication
from service.core.admission.priority import PriorityClass, lane_of
from service.core.chain import build_chain
from service.core.context import MethodInfo
from service.faces.metadata import call_context
from service.shared.api_keys import ApiKeys, KeyHash
from service.shared.client_address import (
    CLIENT_ADDRESS_METADATA_KEY,
    MAX_CLIENT_ADDRESS_CHARS,
    client_address,
    clip_address,
)

SECRET = "team-a-Secret-0001"
KEYS = ApiKeys(entries=(("team-a", KeyHash.of(SECRET)),))
METHOD = MethodInfo("/universal_runtime.v1.InferenceService/Ocr")


def _caller(key_name: str, peer: str, address: str) -> str:
    """The lane a call from ``peer`` for ``address`` runs in, through the server's admission steps."""
    metadata = [(CLIENT_ADDRESS_METADATA_KEY, address)] if address else []
    steps = [PriorityClass()]
    if key_name:
        assert key_name == "team-a"
        metadata.append(("authorization", f"Bearer {SECRET}"))
        steps.insert(0, Authentication(KEYS))
    chain = build_chain(steps)
    ctx = call_context(METHOD, metadata, peer=peer)

    async def operation(ctx, request):
        return current_caller().lane  # what the lanes read, in the call's context

    async def call() -> str:
        lane = await chain.unary(ctx, None, operation)
        assert ctx.caller.lane == lane
        return lane

    lane = asyncio.run(call())
    assert caller_var.get() is DEFAULT_CALLER  # set in the call's context only
    return lane


def test_without_keys_the_address_splits_the_gateways_peer():
    assert _caller("", "in-process", "10.0.0.1") == "in-process 10.0.0.1"
    assert _caller("", "in-process", "10.0.0.2") != _caller("", "in-process", "10.0.0.1")
    assert _caller("", "ipv4:127.0.0.1:5000", "") == "ipv4:127.0.0.1:5000"  # a direct gRPC client
    assert lane_of("in-process", "10.0.0.1") == "in-process 10.0.0.1"
    assert lane_of("ipv4:127.0.0.1:5000", "") == "ipv4:127.0.0.1:5000"


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
    # The faces read it the same way into the call's context.
    ctx = call_context(METHOD, [(CLIENT_ADDRESS_METADATA_KEY, long)])
    assert ctx.client_address == "1" * MAX_CLIENT_ADDRESS_CHARS
