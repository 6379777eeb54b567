"""Sentence embeddings with sentence-transformers (from a hub id or a local folder)."""

from __future__ import annotations

import logging

import numpy as np

from engines.base import Engine
from engines.device import torch_dtype_for, torch_module_memory
from engines.errors import InputTooLongError, InvalidArgumentError
from engines.registry import register_backend
from engines.sources import path_size_bytes, resolve_source
from engines.types import EmbeddingRequest, EmbeddingResult, MemoryUsage, Task, Truncation

log = logging.getLogger(__name__)


@register_backend
class SentenceTransformersEmbeddingEngine(Engine):
    """Embeddings from a ``SentenceTransformer`` model.

    Catalog options: ``batch_size`` (default 32), ``dtype`` (``float32``/``float16``/``bfloat16``;
    default by device), ``max_seq_length`` (override the model's).
    """

    backend = "sentence_transformers"
    tasks = frozenset({Task.EMBED})

    def estimated_load_bytes(self) -> int:
        """Size of the model folder on disk (a local source), else unknown."""
        resolved = resolve_source(self.spec.source)
        return path_size_bytes(resolved.path) if resolved.path else 0

    def load(self) -> None:
        """Load the model onto the device in inference mode."""
        from sentence_transformers import SentenceTransformer

        resolved = resolve_source(self.spec.source)
        dtype = torch_dtype_for(self.device, self.option("dtype"))
        self.model = SentenceTransformer(
            resolved.location,
            device=self.device,
            model_kwargs={"torch_dtype": dtype},
            local_files_only=resolved.path is not None,
        )
        self.model.eval()
        if self.option("max_seq_length"):
            self.model.max_seq_length = int(self.option("max_seq_length"))

    def unload(self) -> None:
        """Drop the model."""
        self.model = None

    def memory_usage(self) -> MemoryUsage:
        """Parameter and buffer bytes by device."""
        if getattr(self, "model", None) is None:
            return MemoryUsage()
        ram, vram = torch_module_memory(self.model)
        return MemoryUsage(ram_bytes=ram, vram_bytes=vram)

    @property
    def dimensions(self) -> int:
        """Length of the model's vectors."""
        return int(self.model.get_sentence_embedding_dimension())

    @property
    def max_seq_length(self) -> int:
        """Longest input in tokens, special tokens included."""
        return int(self.model.max_seq_length)

    def _prefixed(self, request: EmbeddingRequest) -> list[str]:
        if request.prompt_name:
            prompts = self.model.prompts or {}
            if request.prompt_name not in prompts:
                known = ", ".join(sorted(prompts)) or "none"
                raise InvalidArgumentError(
                    f"model {self.spec.name!r} has no prompt named {request.prompt_name!r}; it has: {known}",
                    field="prompt_name",
                )
            return [prompts[request.prompt_name] + text for text in request.inputs]
        if request.prompt:
            return [request.prompt + text for text in request.inputs]
        return list(request.inputs)

    def _token_lengths(self, texts: list[str]) -> list[int]:
        tokenizer = self.model.tokenizer
        encoded = tokenizer(texts, add_special_tokens=True, truncation=False)["input_ids"]
        return [len(ids) for ids in encoded]

    def embed(self, request: EmbeddingRequest) -> EmbeddingResult:
        """Embed ``request.inputs`` (blocking; call through the executor).

        Returns:
            vectors of shape (len(inputs), dimensions or the model's size), float32.

        Raises:
            InvalidArgumentError: ``dimensions`` larger than the model's, unknown prompt name.
            InputTooLongError: an input over ``max_seq_length`` with truncation ERROR (states both lengths).

        """
        import torch

        if request.dimensions and request.dimensions > self.dimensions:
            raise InvalidArgumentError(
                f"dimensions={request.dimensions} is larger than the model's {self.dimensions}",
                field="dimensions",
                dimensions=request.dimensions,
                model_dimensions=self.dimensions,
            )
        texts = self._prefixed(request)
        lengths = self._token_lengths(texts)
        limit = self.max_seq_length
        too_long = [(i, n) for i, n in enumerate(lengths) if n > limit]
        if too_long and request.truncation is Truncation.ERROR:
            index, length = too_long[0]
            raise InputTooLongError(
                f"input {index} is {length} tokens; model {self.spec.name!r} takes at most {limit}",
                field="inputs",
                index=index,
                input_tokens=length,
                max_tokens=limit,
            )
        if request.truncation is Truncation.START and too_long:
            texts = self._keep_last_tokens(texts, lengths, limit)
        tokenizer = self.model.tokenizer
        with torch.inference_mode():
            vectors = self.model.encode(
                texts,
                batch_size=int(self.option("batch_size", 32)),
                convert_to_numpy=True,
                normalize_embeddings=False,
                show_progress_bar=False,
            ).astype(np.float32, copy=False)
        if request.dimensions:
            vectors = vectors[:, : request.dimensions]
        if request.normalize:
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            vectors = vectors / np.maximum(norms, 1e-12)
        used = sum(min(n, limit) for n in lengths)
        del tokenizer
        return EmbeddingResult(vectors=np.ascontiguousarray(vectors), prompt_tokens=used)

    def _keep_last_tokens(self, texts: list[str], lengths: list[int], limit: int) -> list[str]:
        """Cut over-long texts from the start so that their last tokens fit."""
        tokenizer = self.model.tokenizer
        special = lengths[0] - len(tokenizer(texts[0], add_special_tokens=False)["input_ids"]) if texts else 2
        out = []
        for text, length in zip(texts, lengths, strict=True):
            if length <= limit:
                out.append(text)
                continue
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            out.append(tokenizer.decode(ids[len(ids) - (limit - special) :]))
        return out
