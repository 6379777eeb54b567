"""Tokenize and Detokenize pieces every engine shares: id checks, offsets, Hugging Face tokenizers.

Engines with a tokenizer implement :class:`engines.capabilities.Tokenizer` with these: the
Hugging Face helpers serve the encoders and the transformers generation engine, and
:func:`offsets_from_pieces` gives llama.cpp (whose tokenizer reports no offsets) character spans
from the bytes each token spells.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engines.errors import FailedPreconditionError, InputTooLongError, InvalidArgumentError
from engines.reasons import Reason

Offsets = list[tuple[int, int]]


def check_token_ids(ids: Sequence[int], vocabulary_size: int, max_ids: int, model: str) -> list[int]:
    """``ids`` as a list once every id is in ``0 .. vocabulary_size - 1`` and there are at most ``max_ids``.

    Callers pass the model's :func:`~engines.batching.tokens.character_limit`: Tokenize reads at most
    that many characters and no token spells less than one, so any ids Tokenize returned pass, and
    the work is bounded by the model, not by the request.

    Raises:
        InputTooLongError: more than ``max_ids`` ids (reason INPUT_TOO_LONG).
        InvalidArgumentError: an id outside the vocabulary (reason TOKEN_OUT_OF_VOCABULARY, with
            the first such id and its position).

    """
    if len(ids) > max_ids:
        raise InputTooLongError(
            f"{len(ids)} token ids; model {model!r} detokenizes at most {max_ids} "
            "(32 per token of its context, the most Tokenize returns)",
            field="token_ids",
            token_ids=len(ids),
            max_token_ids=max_ids,
        )
    for index, token in enumerate(ids):
        if not 0 <= token < vocabulary_size:
            raise InvalidArgumentError(
                f"token_ids[{index}] = {token} is not in the vocabulary of model {model!r} "
                f"(ids 0..{vocabulary_size - 1})",
                reason=Reason.TOKEN_OUT_OF_VOCABULARY,
                field=f"token_ids[{index}]",
                token_id=token,
                vocabulary_size=vocabulary_size,
            )
    return list(ids)


def no_chat_template(model: str) -> InvalidArgumentError:
    """The error for chat messages sent to a model without a chat template (reason NO_CHAT_TEMPLATE)."""
    return InvalidArgumentError(
        f"model {model!r} has no chat template; send a raw prompt instead",
        reason=Reason.NO_CHAT_TEMPLATE,
        model=model,
    )


def offsets_not_supported(model: str, why: str) -> FailedPreconditionError:
    """The error for ``return_offsets`` on a tokenizer without offsets (reason OFFSETS_NOT_SUPPORTED)."""
    return FailedPreconditionError(
        f"model {model!r} cannot return token offsets: {why}; leave return_offsets unset",
        reason=Reason.OFFSETS_NOT_SUPPORTED,
        field="return_offsets",
        model=model,
    )


def offsets_from_pieces(text: str, pieces: Sequence[bytes]) -> Offsets | None:
    """Character spans of tokens whose pieces (the bytes each spells) make up ``text``, or None.

    Pieces are matched against ``text``'s UTF-8 bytes in order. A piece that is not there gets an
    empty span at the current position (a BOS or EOS the tokenizer added); a piece whose leading
    space is not in the text (SentencePiece's space prefix) matches without it. A token that ends
    inside a character spans the whole character. Returns None when the pieces do not spell the
    whole text (the caller then cannot give offsets).
    """
    data = text.encode("utf-8")
    # char_at[b]: the character that byte b belongs to (len(text) at the end).
    char_at: list[int] = []
    for index, char in enumerate(text):
        char_at.extend([index] * len(char.encode("utf-8")))
    char_at.append(len(text))
    spans: Offsets = []
    position = 0
    for piece in pieces:
        if piece and data.startswith(piece, position):
            start, position = position, position + len(piece)
        elif len(piece) > 1 and piece[:1] == b" " and data.startswith(piece[1:], position):
            start, position = position, position + len(piece) - 1
        else:
            spans.append((char_at[position], char_at[position]))
            continue
        spans.append((char_at[start], char_at[position - 1] + 1))
    return spans if position == len(data) else None


def hf_tokenize(
    tokenizer: Any,
    text: str,
    *,
    add_special_tokens: bool,
    return_token_strings: bool,
    return_offsets: bool,
    model: str,
) -> tuple[list[int], list[str], Offsets]:
    """Token ids of ``text`` with a Hugging Face tokenizer, and the strings and offsets asked for (blocking).

    Returns:
        ids; vocabulary strings (``convert_ids_to_tokens``) or ``[]``; character spans from the
        fast tokenizer's offset mapping (special tokens ``(0, 0)``) or ``[]``.

    Raises:
        FailedPreconditionError: offsets asked of a slow (Python) tokenizer (OFFSETS_NOT_SUPPORTED).

    """
    if return_offsets and not getattr(tokenizer, "is_fast", False):
        raise offsets_not_supported(model, "its tokenizer is a Python (slow) one, without offset mapping")
    encoded = tokenizer(
        text, add_special_tokens=add_special_tokens, truncation=False, return_offsets_mapping=return_offsets
    )
    ids = [int(i) for i in encoded["input_ids"]]
    strings = [str(s) for s in tokenizer.convert_ids_to_tokens(ids)] if return_token_strings else []
    offsets = [(int(a), int(b)) for a, b in encoded["offset_mapping"]] if return_offsets else []
    return ids, strings, offsets


def hf_detokenize(tokenizer: Any, ids: list[int], *, skip_special_tokens: bool) -> str:
    """The text of ``ids`` (checked already) with a Hugging Face tokenizer (blocking).

    Tokenization spaces are kept as the ids spell them (``clean_up_tokenization_spaces`` off), so
    a plain text survives a round trip through the tokenizer.
    """
    return str(
        tokenizer.decode(ids, skip_special_tokens=skip_special_tokens, clean_up_tokenization_spaces=False)
    )
