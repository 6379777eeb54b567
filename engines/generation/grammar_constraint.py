"""JSON output constraints for transformers models with llguidance (Microsoft's Low-level Guidance).

A JSON Schema (or "any JSON object") is compiled by llguidance into a grammar over the
model's tokenizer; each step :meth:`GrammarConstraint.allowed` gives the tokens that keep the
output a valid prefix, and once the value is complete only the end-of-sequence token is
allowed. See https://github.com/guidance-ai/llguidance (``LLMatcher``, ``compute_bitmask``).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np

from engines.errors import InvalidArgumentError
from engines.generation.json_schema_bounds import check_schema_bounds
from engines.generation.pattern_bounds import CompileBudget
from engines.generation.structured import OutputConstraint
from engines.reasons import Reason

if TYPE_CHECKING:
    import torch

#: Compact, deterministic JSON layout: small models given free whitespace tend to emit newlines
#: until max_tokens. A schema's own ``x-guidance`` options override these.
JSON_LAYOUT: dict[str, Any] = {
    "whitespace_flexible": False,
    "item_separator": ", ",
    "key_separator": ": ",
    # Tool-call schemas are a oneOf of variants that differ in their ``name`` const.
    "coerce_one_of": True,
}


class GrammarTokenizer:
    """llguidance's view of a Hugging Face fast tokenizer (slow to build: build once per model).

    Args:
        hf_tokenizer: a ``PreTrainedTokenizerFast``.
        eos_token_ids: ids that end generation; the first is the one the grammar allows at the end.

    Raises:
        InvalidArgumentError: the tokenizer is not a fast one (llguidance reads its Rust JSON).

    """

    def __init__(self, hf_tokenizer: Any, eos_token_ids: list[int]) -> None:
        import llguidance.hf

        try:
            self.tokenizer = llguidance.hf.from_tokenizer(hf_tokenizer, eos_token=eos_token_ids[0])
        except ValueError as exc:
            raise InvalidArgumentError(
                f"structured output needs a fast tokenizer: {exc}",
                reason=Reason.STRUCTURED_OUTPUT_UNSUPPORTED,
            ) from None

    def constraint(self, spec: OutputConstraint) -> GrammarConstraint:
        """A fresh matcher for one sequence.

        Raises:
            InvalidArgumentError: the schema exceeds a bound of :func:`check_schema_bounds`
                (reason JSON_SCHEMA_TOO_COMPLEX) or cannot be compiled (reason INVALID_JSON_SCHEMA).

        """
        from llguidance import LLMatcher

        schema = spec.schema if spec.schema is not None else {"type": "object"}
        # The same bounds as llama.cpp's grammars, before native code (patterns that passed are cached).
        check_schema_bounds(schema, CompileBudget())
        try:
            grammar = LLMatcher.grammar_from_json_schema(json.dumps(schema), defaults=JSON_LAYOUT)
        except ValueError as exc:
            raise _invalid(str(exc)) from None
        error = LLMatcher.validate_grammar(grammar, self.tokenizer)
        if error:
            raise _invalid(error)
        return GrammarConstraint(LLMatcher(self.tokenizer, grammar, log_level=0), self.tokenizer.eos_token)


class GrammarConstraint:
    """One sequence's matcher: which tokens may come next, and the tokens chosen so far."""

    def __init__(self, matcher: Any, eos_token_id: int) -> None:
        self._matcher = matcher
        self._eos = eos_token_id

    def allowed(self, vocab_size: int, device: torch.device | str) -> torch.Tensor:
        """Boolean ``[vocab_size]`` mask of the tokens allowed next (ids past the tokenizer's are never)."""
        import torch

        bits = np.unpackbits(
            np.frombuffer(self._matcher.compute_bitmask(), dtype=np.uint8), bitorder="little"
        )
        mask = np.zeros(vocab_size, dtype=bool)
        n = min(vocab_size, bits.shape[0])
        mask[:n] = bits[:n].astype(bool)
        if not mask.any():  # a matcher in an error state allows nothing: end the sequence instead
            mask[self._eos] = True
        return torch.from_numpy(mask).to(device)

    def accept(self, token: int) -> None:
        """Advance the matcher past ``token`` (always one :meth:`allowed` permitted)."""
        self._matcher.consume_token(token)


def _invalid(detail: str) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"the JSON schema cannot be enforced: {detail}", reason=Reason.INVALID_JSON_SCHEMA
    )
