"""Catalog options shared by the batched encoder backends: batch limits, lane, dtype and runtime.

A light module (no torch, no runtime package): the catalog check and the JSON Schema import every
backend's options. Each encoder backend's own model (``engines/<package>/options.py``) adds its
options to :class:`EncoderOptions` (torch only) or :class:`ExportableEncoderOptions` (torch, ONNX
Runtime or OpenVINO).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import NonNegativeFloat, ValidationInfo, field_validator

from engines.encoder_runtime import Quantization, Runtime, RuntimeChoice
from engines.options import (
    MAX_BATCH_OVERRIDE,
    OVERRIDE,
    AtLeastOne,
    LoadOverride,
    QueuedEngineOptions,
    TorchDtypeOptions,
    TorchEngineOptions,
)


class BatchingConfig(QueuedEngineOptions):
    """Limits of one :class:`~engines.batching.DynamicBatcher`; each is a catalog option of the model.

    ``max_queue_wait_s`` (from :class:`~engines.options.QueuedEngineOptions`): the longest an item
    may wait in the queue; one that waited longer fails with RESOURCE_EXHAUSTED
    (QUEUE_WAIT_EXCEEDED) before its batch, instead of a late answer (0: no limit).
    """

    max_batch_tokens: Annotated[AtLeastOne, LoadOverride(at_most=16 * MAX_BATCH_OVERRIDE)] = 16384
    """Most padded tokens per batch (inputs x the longest input's tokens); one longer input still runs
    alone."""
    max_batch_size: Annotated[AtLeastOne, LoadOverride(at_most=4096)] = 64
    """Most inputs per batch."""
    max_wait_ms: Annotated[NonNegativeFloat, LoadOverride(at_most=1000)] = 0.0
    """Milliseconds the oldest queued input waits for more before its batch runs; 0: batch what is queued
    when the device is free."""
    max_queue: Annotated[AtLeastOne, LoadOverride(at_most=MAX_BATCH_OVERRIDE)] = 4096
    """Most inputs waiting for a batch; more are refused with OVERLOADED (HTTP 429)."""
    fair_batch_ms: Annotated[NonNegativeFloat, LoadOverride(at_most=10_000)] = 25.0
    """While inputs of more than one API key arrived in the last second, most estimated milliseconds of
    device time per batch, so that another key's input waits about two such batches, not two full ones;
    0: batches as large as the other limits allow."""


class EncoderOptions(BatchingConfig, TorchEngineOptions, TorchDtypeOptions):
    """Options of every batched encoder backend: the batch limits, the lane's threads and niceness, dtype."""


class ExportableEncoderOptions(EncoderOptions):
    """Options of encoders that may run in ONNX Runtime or OpenVINO (:mod:`engines.encoder_runtime`)."""

    runtime: Annotated[Runtime, OVERRIDE] = "torch"
    """What runs the forward pass: torch, onnx (ONNX Runtime) or openvino; the last two on the CPU only (on
    a GPU the model stays in torch)."""
    quantize: Annotated[Quantization, OVERRIDE] = "none"
    """int8: weights quantized by the exported runtime (needs runtime onnx or openvino)."""
    cache_dir: str | None = None
    """Folder of the exported copies; unset: ~/.cache/universal-runtime/converted (under XDG_CACHE_HOME
    when set)."""

    @field_validator("quantize")
    @classmethod
    def _quantize_needs_an_exported_runtime(cls, value: str, info: ValidationInfo) -> str:
        # A cross-field rule checked on quantize (declared after runtime) so the error names it.
        if value != "none" and info.data.get("runtime") == "torch":
            raise ValueError(f"{value} needs runtime onnx or openvino, not torch")
        return value

    @property
    def runtime_choice(self) -> RuntimeChoice:
        """How the forward pass runs: the ``runtime`` and ``quantize`` options."""
        return RuntimeChoice(self.runtime, self.quantize)


def exported_runtime(options: EncoderOptions) -> ExportableEncoderOptions | None:
    """``options`` when they choose a runtime other than torch (the model is exported), else None."""
    if isinstance(options, ExportableEncoderOptions) and options.runtime_choice.exported:
        return options
    return None
