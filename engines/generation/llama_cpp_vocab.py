"""The vocabulary of a loaded llama.cpp model: token pieces, tokenization, detokenization and offsets.

:class:`LlamaCppVocabulary` answers the engine's text-to-tokens and tokens-to-text questions
through llama.cpp's vocabulary calls (``llama_tokenize``, ``llama_token_to_piece``,
``llama_detokenize``, ``llama_vocab_is_eog``), with the bytes of each token's piece cached.
"""

from __future__ import annotations

from typing import Any

from engines.tokenization import Offsets, offsets_from_pieces, offsets_not_supported


class LlamaCppVocabulary:
    """Tokens of one llama-cpp-python ``LlamaModel``.

    Attributes:
        bos_text: the text of the model's BOS token ("" when it has none).
        eos_text: the text of the model's EOS token ("" when it has none).

    """

    def __init__(self, model: Any) -> None:
        self._model = model
        self._pieces: dict[int, bytes] = {}
        self.bos_text = self.piece_text(model.token_bos(), special=True)
        self.eos_text = self.piece_text(model.token_eos(), special=True)

    def close(self) -> None:
        """Let go of the model (it is being freed); pieces read already are still answered."""
        self._model = None

    def is_end_of_generation(self, token_id: int) -> bool:
        """EOS and the vocabulary's other end-of-generation tokens (e.g. ``<|im_end|>``)."""
        import llama_cpp

        return bool(llama_cpp.llama_vocab_is_eog(self._model.vocab, token_id))

    def token_bytes(self, token_id: int) -> bytes:
        """Bytes of one token's piece (special tokens render as nothing)."""
        piece = self._pieces.get(token_id)
        if piece is None:
            piece = self._pieces[token_id] = self.piece(token_id, special=False)
        return piece

    def piece(self, token_id: int, special: bool) -> bytes:
        """Bytes of one token's piece; ``special`` renders special tokens as their text."""
        import ctypes

        import llama_cpp

        size = 64
        while True:
            buffer = ctypes.create_string_buffer(size)
            n = llama_cpp.llama_token_to_piece(self._model.vocab, token_id, buffer, size, 0, special)
            if n >= 0:
                return buffer.raw[:n]
            size = -n  # a negative result is the size the piece needs

    def piece_text(self, token_id: int, special: bool = False) -> str:
        """:meth:`piece` as text (invalid UTF-8 replaced); "" for a negative id (no such token)."""
        if token_id < 0:
            return ""
        return self.piece(token_id, special).decode("utf-8", errors="replace")

    def tokenize(self, text: str, *, templated: bool, add_special: bool | None = None) -> list[int]:
        """Token ids of ``text`` (see :meth:`GenerationEngine._tokenize`)."""
        # A template that writes BOS itself must not get a second one. llama.cpp adds BOS (and EOS)
        # only where the model's metadata asks for them.
        add_bos = add_special
        if add_bos is None:
            add_bos = not (templated and self.bos_text and text.startswith(self.bos_text))
        return self._model.tokenize(text.encode("utf-8"), add_bos=add_bos, special=True)

    def token_strings(self, ids: list[int]) -> list[str]:
        """The vocabulary string of each id."""
        import llama_cpp

        return [
            llama_cpp.llama_vocab_get_text(self._model.vocab, token).decode("utf-8", errors="replace")
            for token in ids
        ]

    def offsets(self, text: str, ids: list[int], model: str) -> Offsets:
        """Character span in ``text`` of each of ``ids`` (the tokens of ``text``).

        Raises:
            FailedPreconditionError: the tokens do not spell ``text`` byte for byte
                (OFFSETS_NOT_SUPPORTED; the message names ``model``).

        """
        # llama.cpp reports no offsets: spans come from the bytes each token spells (special
        # tokens by their text, as the templated prompt writes them).
        spans = offsets_from_pieces(text, [self.piece(token, special=True) for token in ids])
        if spans is None:
            raise offsets_not_supported(model, "its tokens do not spell the text byte for byte")
        return spans

    def detokenize(self, ids: list[int], skip_special_tokens: bool) -> str:
        """The text of ``ids``; special tokens are left out when ``skip_special_tokens``."""
        import ctypes

        import llama_cpp

        tokens = (llama_cpp.llama_token * max(1, len(ids)))(*ids)
        size = max(64, 16 * len(ids))
        while True:
            buffer = ctypes.create_string_buffer(size)
            # remove_special drops the BOS/EOS the model adds; unparse_special writes the text of
            # special tokens (left out when they are skipped).
            n = llama_cpp.llama_detokenize(
                self._model.vocab,
                tokens,
                len(ids),
                buffer,
                size,
                skip_special_tokens,
                not skip_special_tokens,
            )
            if n >= 0:
                return buffer.raw[:n].decode("utf-8", errors="replace")
            size = -n  # a negative result is the size the text needs
