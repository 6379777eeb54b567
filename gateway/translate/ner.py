"""NER: ``POST /v1/ner`` body to ``ExtractEntitiesRequest``, the response to JSON.

Response shape::

    {"object": "list", "model": str,
     "data": [{"object": "entities", "index": int,
               "entities": [{"text", "label", "start", "end", "score"}]}],
     "usage": {"prompt_tokens": int, "total_tokens": int}}

``start``/``end`` are code-point offsets into the input (``input[start:end] == text``).
"""

from __future__ import annotations

from typing import Any

from universal_runtime.v1 import encoders_pb2

from gateway.schemas.ner import NerRequest
from gateway.translate.common import BodyFields
from gateway.translate.encoders import list_json, texts_fields

_ENTITIES = BodyFields(
    NerRequest,
    encoders_pb2.ExtractEntitiesRequest,
    ("min_score", "labels"),
    by_hand=("model", "input", "keep_alive"),
)


def to_entities_request(request: NerRequest) -> encoders_pb2.ExtractEntitiesRequest:
    """Convert the HTTP body to ``ExtractEntitiesRequest``."""
    return encoders_pb2.ExtractEntitiesRequest(**texts_fields(request), **_ENTITIES.values(request))


def entities_from_proto(
    response: encoders_pb2.ExtractEntitiesResponse, *, requested_model: str
) -> dict[str, Any]:
    """Convert ``ExtractEntitiesResponse`` to the JSON list shown in the module docstring."""
    data = [
        {
            "object": "entities",
            "index": item.index,
            "entities": [
                {"text": x.text, "label": x.label, "start": x.start, "end": x.end, "score": x.score}
                for x in item.entities
            ],
        }
        for item in response.results
    ]
    return list_json(response, requested_model=requested_model, data=data)
