"""``POST /v1/classify`` over ``Classify``, and custom classifiers under ``/v1/classifiers``.

``POST /v1/classifiers`` fits and saves one (``FitClassifier``), ``GET /v1/classifiers`` lists
them, ``DELETE /v1/classifiers/{name}`` deletes one. Each is the calling key's own, or with
``shared`` (admin keys only) in the namespace every key may use.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from universal_runtime.v1 import encoders_pb2

from gateway.calls import CallSite, Rpc
from gateway.json_body import JsonBodyRoute
from gateway.schemas.classify import ClassifyRequest, FitClassifierRequest
from gateway.translate.classify import (
    classifier_json,
    classify_from_proto,
    to_classify_request,
    to_fit_classifier_request,
)

router = APIRouter(tags=["encoders"], route_class=JsonBodyRoute)


@router.post("/v1/classify")
async def classify(body: ClassifyRequest, rpc: Rpc) -> dict[str, Any]:
    """Classify texts with a catalog classifier, a custom classifier, or zero-shot ``candidate_labels``.

    Raises:
        grpc.aio.AioRpcError: NOT_FOUND (404) when ``model`` is neither a catalog model nor a saved
            classifier; INVALID_ARGUMENT (400) for empty or too many inputs, or empty or repeated
            ``candidate_labels``; other failures as mapped by :mod:`gateway.errors`.

    """
    return await answer_classify(rpc, body)


async def answer_classify(site: CallSite, body: ClassifyRequest) -> dict[str, Any]:
    """The answer of :func:`classify` to ``body``, its call made at ``site``.

    Raises:
        GatewayError: The site's own bound ended the call (499: the HTTP client left).
        grpc.aio.AioRpcError: As :func:`classify`.

    """
    response = await site.unary(site.clients.inference.Classify, to_classify_request(body))
    return classify_from_proto(
        response, requested_model=body.model, multi_label=body.multi_label, all_scores=body.all_scores
    )


@router.post("/v1/classifiers")
async def fit_classifier(body: FitClassifierRequest, rpc: Rpc) -> dict[str, Any]:
    """Fit a classifier head on embeddings of labelled examples and save it; returns its description.

    Raises:
        grpc.aio.AioRpcError: FAILED_PRECONDITION (400, ``classifier_exists``) for a saved name
            without ``overwrite``; INVALID_ARGUMENT (400) for a catalog model's name or unusable
            examples; PERMISSION_DENIED (403) for ``shared`` from a key without role admin; other
            failures as mapped by :mod:`gateway.errors`.

    """
    response = await rpc.unary(rpc.clients.inference.FitClassifier, to_fit_classifier_request(body))
    return classifier_json(response.classifier)


@router.get("/v1/classifiers")
async def list_classifiers(rpc: Rpc) -> dict[str, Any]:
    """The custom classifiers the key may use, its own and shared: ``{"object": "list", "data": [...]}``."""
    response = await rpc.unary(rpc.clients.inference.ListClassifiers, encoders_pb2.ListClassifiersRequest())
    return {"object": "list", "data": [classifier_json(info) for info in response.classifiers]}


@router.delete("/v1/classifiers/{name}")
async def delete_classifier(name: str, rpc: Rpc, shared: bool = False) -> dict[str, Any]:
    """Delete the key's own classifier (``?shared=true``: the shared one).

    Answers ``{"object": "classifier", "name", ..., "deleted": true}``.

    Raises:
        grpc.aio.AioRpcError: NOT_FOUND (404) when there is no such classifier (or it is another
            key's); PERMISSION_DENIED (403) for ``shared`` from a key without role admin.

    """
    request = encoders_pb2.DeleteClassifierRequest(name=name, shared=shared)
    response = await rpc.unary(rpc.clients.inference.DeleteClassifier, request)
    return {**classifier_json(response.classifier), "deleted": True}
