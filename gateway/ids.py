"""Identifiers, timestamps and fingerprints of answers, spelled as each public API spells them.

Clients and their tests check these shapes, so every route takes them from here:

========================  =====================  ==============================================
helper                    example                API (source)
========================  =====================  ==============================================
:func:`chat_completion_id`  ``chatcmpl-<32 hex>``  OpenAI Chat Completions (``chat.completion``)
:func:`completion_id`     ``cmpl-<32 hex>``      OpenAI legacy Completions (``text_completion``)
:func:`response_id`       ``resp_<48 hex>``      OpenAI Responses API (``response.id``)
:func:`message_id`        ``msg_<48 hex>``       Responses ``message`` output items; Anthropic
                                                 Messages ``message.id`` (both use ``msg_``)
:func:`function_call_id`  ``fc_<48 hex>``        Responses ``function_call`` item ``id``
:func:`reasoning_id`      ``rs_<48 hex>``        Responses ``reasoning`` item ``id``
:func:`output_item_id`    ``msg_``/``fc_``/``rs_``  Responses output items, fixed by response and place
:func:`tool_call_id`      ``call_<24 hex>``      Chat ``tool_calls[].id``, Responses ``call_id``
:func:`tool_use_id`       ``toolu_<24 base62>``  Anthropic ``tool_use`` block ``id``
========================  =====================  ==============================================

Only the prefixes are part of the APIs' contracts; the random tails are ours (hex, or base62
where Anthropic's ids are base62). ``created`` / ``created_at`` are whole Unix seconds
(:func:`unix_now`) in both OpenAI and Anthropic objects. ``system_fingerprint``
(:func:`system_fingerprint`) is OpenAI's "backend configuration" marker: ``fp_`` and 10 hex
characters, stable for one model on one runtime version.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import secrets
import string
import time

#: Prefix of the gRPC server's generation ids (``gen-`` and 32 hex characters, the same on every
#: message of one call); OpenAI ids keep the hex part so an answer still finds its server log line.
SERVER_ID_PREFIX = "gen-"

_BASE62 = string.digits + string.ascii_letters


def _hex(chars: int) -> str:
    return secrets.token_hex(chars // 2)


def from_server_id(prefix: str, server_id: str) -> str:
    """Return ``<prefix>-<hex>``, the hex part taken from a server id ``gen-<hex>`` (fresh if empty).

    Args:
        prefix: The API's prefix without its dash (``"chatcmpl"``, ``"cmpl"``).
        server_id: ``GenerateResponse.id`` / ``GenerateStreamResponse.id``; may be empty.

    """
    return f"{prefix}-{server_id.removeprefix(SERVER_ID_PREFIX) or _hex(32)}"


def chat_completion_id(server_id: str = "") -> str:
    """Return a Chat Completions id, ``chatcmpl-<hex>``.

    Args:
        server_id: ``GenerateResponse.id`` / ``GenerateStreamResponse.id`` (``gen-<hex>``); its hex
            part is kept. Empty: a fresh 32-hex tail.

    """
    return from_server_id("chatcmpl", server_id)


def completion_id(server_id: str = "") -> str:
    """Return a legacy Completions id, ``cmpl-<hex>`` (``server_id`` as in :func:`chat_completion_id`)."""
    return from_server_id("cmpl", server_id)


def response_id() -> str:
    """Return a fresh OpenAI Responses id, ``resp_`` and 48 hex characters."""
    return "resp_" + _hex(48)


def message_id() -> str:
    """Return a fresh message id, ``msg_`` and 48 hex characters.

    Used for Responses ``message`` output items and Anthropic Messages ``message.id``; both
    APIs spell the prefix ``msg_``.
    """
    return "msg_" + _hex(48)


def function_call_id() -> str:
    """Return a fresh Responses ``function_call`` item id, ``fc_`` and 48 hex characters."""
    return "fc_" + _hex(48)


def reasoning_id() -> str:
    """Return a fresh Responses ``reasoning`` item id, ``rs_`` and 48 hex characters."""
    return "rs_" + _hex(48)


def output_item_id(prefix: str, response: str, index: int) -> str:
    """Return the id of a Responses output item: ``<prefix>_`` and 48 hex characters, fixed by its place.

    The same response id and output index always give the same id, so a response rendered again
    from its stored answer (``GET /v1/responses/{id}``, ``input_items``) names its items as the
    answer did.

    Args:
        prefix: ``msg``, ``fc`` or ``rs``.
        response: The response's id (``resp_…``).
        index: The item's place in the response's ``output`` (0, 1, ...).

    """
    digest = hashlib.sha256(f"{response}/{prefix}/{index}".encode()).hexdigest()
    return f"{prefix}_{digest[:48]}"


def tool_call_id() -> str:
    """Return a fresh tool call id, ``call_`` and 24 hex characters.

    Chat ``tool_calls[].id`` and the Responses ``function_call`` item's ``call_id``.
    """
    return "call_" + _hex(24)


def tool_use_id() -> str:
    """Return a fresh Anthropic ``tool_use`` block id, ``toolu_`` and 24 base62 characters."""
    return "toolu_" + "".join(secrets.choice(_BASE62) for _ in range(24))


def unix_now() -> int:
    """Return the current Unix time in whole seconds (OpenAI ``created`` / ``created_at``)."""
    return int(time.time())


@functools.cache
def runtime_version() -> str:
    """Return the installed ``universal-runtime`` version (``"0+unknown"`` from an uninstalled tree)."""
    try:
        return importlib.metadata.version("universal-runtime")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"


@functools.lru_cache(maxsize=256)
def system_fingerprint(model: str) -> str:
    """Return OpenAI's ``system_fingerprint`` for answers of ``model``: ``fp_`` and 10 hex characters.

    The hash covers the model name and the runtime version, so it is stable across requests and
    replicas of one build and changes when either changes (OpenAI: "the backend configuration that
    the model runs with"). The last 256 model names are cached (names come from requests, so the
    cache is bounded).
    """
    digest = hashlib.sha256(f"{model}\0{runtime_version()}".encode()).hexdigest()
    return "fp_" + digest[:10]
