"""Raw bytes of each token of a Hugging Face tokenizer, for incremental UTF-8 decoding.

``tokenizer.decode([id])`` of a single token that holds part of a multi-byte character gives
U+FFFD, so streaming needs each token's bytes. Byte-level BPE vocabularies (GPT-2, Llama 3,
SmolLM, Qwen) spell bytes as printable characters (GPT-2's ``bytes_to_unicode`` table, from
openai/gpt-2 ``encoder.py``); SentencePiece-style ones (Llama 2, Mistral) use ``▁`` for a space
and ``<0xNN>`` byte-fallback tokens. Special tokens render as nothing, as in llama.cpp.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

BYTE_FALLBACK = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")
SPIECE_SPACE = "\u2581"  # ▁


@functools.cache
def gpt2_byte_decoder() -> dict[str, int]:
    """Inverse of GPT-2's ``bytes_to_unicode``: printable stand-in character -> byte value."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    chars = list(printable)
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


def _decoder_kinds(tokenizer: Any) -> str:
    """The backend tokenizer's decoder configuration as JSON text ('' for slow tokenizers)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return ""
    return json.dumps(json.loads(backend.to_str()).get("decoder"))


def token_piece_table(tokenizer: Any, vocab_size: int) -> list[bytes]:
    """Bytes of every token id below ``vocab_size`` (ids the tokenizer lacks map to ``b""``)."""
    special = set(tokenizer.all_special_ids)
    added = {
        token_id: token
        for token_id, token in getattr(tokenizer, "added_tokens_decoder", {}).items()
        if getattr(token, "special", False)
    }
    special.update(added)
    decoder = _decoder_kinds(tokenizer)
    byte_level = "ByteLevel" in decoder
    pieces = tokenizer.convert_ids_to_tokens(list(range(min(vocab_size, len(tokenizer)))))
    table: list[bytes] = []
    byte_decoder = gpt2_byte_decoder()
    for token_id, piece in enumerate(pieces):
        if piece is None or token_id in special:
            table.append(b"")
        elif byte_level and all(c in byte_decoder for c in piece):
            table.append(bytes(byte_decoder[c] for c in piece))
        elif (match := BYTE_FALLBACK.match(piece)) is not None:
            table.append(bytes([int(match.group(1), 16)]))
        elif decoder and not byte_level:
            table.append(piece.replace(SPIECE_SPACE, " ").encode("utf-8"))
        elif decoder:
            table.append(piece.encode("utf-8"))  # an added non-special token: stored as plain text
        else:
            table.append(tokenizer.decode([token_id]).encode("utf-8"))
    table.extend(b"" for _ in range(vocab_size - len(table)))
    return table
