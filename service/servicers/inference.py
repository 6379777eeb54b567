"""InferenceService: one class composed of a mixin per area (a file each)."""

from __future__ import annotations

from universal_runtime.v1 import inference_service_pb2_grpc

from service.servicers.anomaly import AnomalyRpcs
from service.servicers.encoders import EncoderRpcs
from service.servicers.generation import GenerationRpcs
from service.servicers.ocr import OcrRpcs


class InferenceServicer(
    GenerationRpcs, EncoderRpcs, OcrRpcs, AnomalyRpcs, inference_service_pb2_grpc.InferenceServiceServicer
):
    """Implements ``universal_runtime.v1.InferenceService``; construct with (manager, settings)."""
