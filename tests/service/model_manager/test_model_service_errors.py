"""ModelService on names outside the catalog: NOT_FOUND with ErrorInfo MODEL_NOT_FOUND."""

from __future__ import annotations

import grpc
import pytest
from universal_runtime.v1 import model_service_pb2 as m

from tests.conftest import EMBED_MODEL, error_info

UNKNOWN = "no-such-model"


@pytest.mark.parametrize(
    ("method", "request_"),
    [
        ("GetModel", m.GetModelRequest(name=UNKNOWN)),
        ("LoadModel", m.LoadModelRequest(name=UNKNOWN)),
        ("UnloadModel", m.UnloadModelRequest(name=UNKNOWN)),
    ],
)
async def test_unknown_model_is_not_found(models, method, request_):
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await getattr(models, method)(request_)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND, caught.value.details()
    assert UNKNOWN in caught.value.details()
    info = error_info(caught.value)
    assert info.reason == "MODEL_NOT_FOUND"
    assert info.domain == "universal-runtime"
    assert info.metadata["model"] == UNKNOWN
    # The catalog itself is unchanged: a known name still answers.
    known = await models.GetModel(m.GetModelRequest(name=EMBED_MODEL))
    assert known.model.name == EMBED_MODEL


async def test_get_model_without_a_name_is_invalid(models):
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await models.GetModel(m.GetModelRequest())
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(caught.value).metadata["field"] == "name"
