"""Token-id ``input`` of ``/v1/embeddings``, read as OpenAI reads it: ids of tiktoken's cl100k_base.

OpenAI's embeddings API takes an input as token ids of its own tokenizer, and OpenAI clients send
them (LangChain's ``OpenAIEmbeddings`` does by default: it cuts texts into chunks of cl100k_base
tokens, the encoding it falls back to for model names it does not know). Those ids mean nothing in
the served model's vocabulary, so the gateway decodes them back to the text with the same encoding
and embeds the text. The encoding's file must already be on the machine (tiktoken's cache:
``TIKTOKEN_CACHE_DIR``, or ``DATA_GYM_CACHE_DIR``, or ``<tmp>/data-gym-cache``; the client that
made the ids had it): the gateway never downloads it, and answers 400 when it is missing.
"""

from __future__ import annotations

import functools
import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any

from gateway.errors import GatewayError

ENCODING = "cl100k_base"
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
def _encoding() -> Any:
    import tiktoken

    return tiktoken.get_encoding(ENCODING)


def texts_from_token_ids(token_ids: list[int] | list[list[int]]) -> list[str]:
    """Decode one input's ids (a list of ints) or several (a list of lists) to their texts.

    Blocking (the first call reads and parses the ~1.7 MB encoding file): run it off the event loop.

    Raises:
        GatewayError: 400 ``input_too_long`` over :data:`MAX_TOKEN_IDS` ids in all;
            400 ``token_ids_not_supported`` when tiktoken or its cl100k_base file is not on this
            machine; 400 ``invalid_token_id`` for an id outside cl100k_base.

    """
    rows = [token_ids] if token_ids and isinstance(token_ids[0], int) else token_ids
    total = sum(len(row) for row in rows)
    if total > MAX_TOKEN_IDS:
        raise GatewayError(
            400, f"input: {total} token ids, at most {MAX_TOKEN_IDS}", code="input_too_long", param="input"
        )
    if not cached_encoding_file().is_file():
        raise GatewayError(
            400,
            f"input: token ids are read as OpenAI's {ENCODING} ids, and that encoding's file is not on "
            "this machine (tiktoken's cache); send the texts instead (LangChain's OpenAIEmbeddings: "
            "check_embedding_ctx_length=False)",
            code="token_ids_not_supported",
            param="input",
        )
    try:
        encoding = _encoding()
    except ImportError:
        raise GatewayError(
            400,
            "input: token ids need the tiktoken package; send the texts instead",
            code="token_ids_not_supported",
            param="input",
        ) from None
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
