"""Catalog options of the classification backends (a light module: no torch, no scikit-learn)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from engines.batching.options import ExportableEncoderOptions
from engines.embedding.options import SentenceTransformersOptions
from engines.options import MAX_BATCH_OVERRIDE, OVERRIDE, AtLeastOne, LoadOverride, NonEmptyStr


class TransformersClassifierOptions(ExportableEncoderOptions):
    """Options of ``transformers_classifier``: the encoder options plus the longest input."""

    max_seq_length: Annotated[AtLeastOne | None, LoadOverride(at_most=MAX_BATCH_OVERRIDE)] = None
    """Longest input in tokens; unset: the smaller of the tokenizer's model_max_length and the model's
    max_position_embeddings."""


class EmbeddingHeadOptions(SentenceTransformersOptions):
    """Options of ``embedding_head``: its head files and encoder, plus the encoder's own options.

    The encoder's options (:class:`SentenceTransformersOptions`: dtype, max_seq_length, runtime,
    batch limits...) go to the encoder it loads; :meth:`encoder_options` picks them out.
    """

    embedding_source: str = Field()
    """The sentence-transformers encoder whose vectors the head reads (a source: pkg://..., a folder or a
    hub id); required."""
    head: NonEmptyStr = "LogisticRegression.joblib"
    """File of the scikit-learn head in the source folder (.skops: skops' safe loader; other files: joblib,
    only from an installed package's pkg:// source)."""
    label_map: NonEmptyStr | None = None
    """File in the source folder with a dict from class ids to names; unset: the head's classes are the
    names."""
    normalize: Annotated[bool, OVERRIDE] = False
    """Scale vectors to unit L2 norm before the head (false: the encoder's own output, as the head was
    trained)."""

    def encoder_options(self) -> dict[str, Any]:
        """The options set in the catalog that belong to the encoder (its catalog ``options``)."""
        encoder = SentenceTransformersOptions.model_fields
        return {name: getattr(self, name) for name in self.model_fields_set if name in encoder}
