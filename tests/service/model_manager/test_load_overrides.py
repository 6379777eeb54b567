"""LoadModel's option overrides: validated like the catalog's, in force until unload.

A server of its own over the real SmolLM2 GGUF (llama.cpp): ``n_ctx`` shows in the KV cache's size
(``max_sequences x n_ctx`` cells), so an override's effect is observed through GetModel.
"""

from __future__ import annotations

import grpc
import pytest
import yaml
from google.protobuf import struct_pb2
from universal_runtime.v1 import model_service_pb2 as m
from universal_runtime.v1 import model_service_pb2_grpc

from service.convert.models import MAX_OPTION_OVERRIDE_BYTES, MAX_OPTION_OVERRIDES
from service.server import start_server
from service.settings import Settings
from tests.conftest import GGUF_SOURCE, error_info

GGUF = "override-gguf"
BROKEN = "override-broken"
SEQUENCES = 2
CATALOG = {
    "models": {
        GGUF: {
            "tasks": ["generate"],
            "backend": "llama_cpp",
            "source": GGUF_SOURCE,
            "options": {"n_ctx": 512, "max_sequences": SEQUENCES},
        },
        BROKEN: {"tasks": ["generate"], "backend": "llama_cpp", "source": "/nonexistent/model.gguf"},
    }
}


@pytest.fixture(scope="module")
async def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("overrides")
    catalog = folder / "catalog.yaml"
    catalog.write_text(yaml.safe_dump(CATALOG))
    server = await start_server(
        Settings(
            grpc_port=0, metrics_port=0, catalog_path=catalog, data_dir=folder / "data", shutdown_grace_s=1.0
        )
    )
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        yield model_service_pb2_grpc.ModelServiceStub(channel)
    await server.stop(grace=1.0)


def struct(**values) -> struct_pb2.Struct:
    result = struct_pb2.Struct()
    result.update(values)
    return result


async def load(models, **options) -> m.Model:
    return (await models.LoadModel(m.LoadModelRequest(name=GGUF, options=struct(**options)))).model


async def refused(call) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return caught.value


@pytest.fixture
async def unloaded(models):
    yield
    await models.UnloadModel(m.UnloadModelRequest(name=GGUF))


async def test_an_override_applies_to_the_load_and_shows_in_get_model(models, unloaded):
    before = (await models.GetModel(m.GetModelRequest(name=GGUF))).model
    assert dict(before.options) == {"n_ctx": 512, "max_sequences": SEQUENCES}
    loaded = await load(models, n_ctx=1024.0)  # a Struct number: a double
    assert loaded.status == m.MODEL_STATUS_READY, loaded.status_detail
    assert loaded.kv_cache.cells_total == SEQUENCES * 1024
    got = (await models.GetModel(m.GetModelRequest(name=GGUF))).model
    assert dict(got.options) == {"n_ctx": 1024, "max_sequences": SEQUENCES}


async def test_the_same_options_again_are_a_no_op_and_other_ones_are_refused(models, unloaded):
    first = await load(models, n_ctx=1024)
    again = await load(models, n_ctx=1024.0, max_sequences=SEQUENCES)  # the catalog's value, said again
    assert again.loaded_at_unix_ms == first.loaded_at_unix_ms  # not reloaded
    for other in ({"n_ctx": 2048}, {}):  # {}: exactly the catalog's options (n_ctx 512)
        error = await refused(models.LoadModel(m.LoadModelRequest(name=GGUF, options=struct(**other))))
        assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
        info = error_info(error)
        assert info.reason == "MODEL_LOADED_WITH_OTHER_OPTIONS"
        assert "n_ctx=1024" in error.details() and "unload it first" in error.details()
    # Without options, LoadModel asks for nothing: the loaded model stays as it is.
    plain = (await models.LoadModel(m.LoadModelRequest(name=GGUF, keep_alive="10m"))).model
    assert (plain.loaded_at_unix_ms, plain.kv_cache.cells_total) == (
        first.loaded_at_unix_ms,
        SEQUENCES * 1024,
    )


async def test_after_an_unload_the_catalogs_options_are_back(models, unloaded):
    await load(models, n_ctx=1024)
    unloaded_model = (await models.UnloadModel(m.UnloadModelRequest(name=GGUF))).model
    assert dict(unloaded_model.options) == {"n_ctx": 512, "max_sequences": SEQUENCES}
    plain = (await models.LoadModel(m.LoadModelRequest(name=GGUF))).model
    assert plain.kv_cache.cells_total == SEQUENCES * 512


BAD_OVERRIDES = {
    "unknown option": ({"n_ctxt": 1024}, "n_ctxt", "did you mean n_ctx"),
    "wrong type": ({"n_ctx": "many"}, "n_ctx", "valid integer"),
    "fractional number for an integer": ({"n_ctx": 4096.5}, "n_ctx", "fractional part"),
    "out of range": ({"max_sequences": 0}, "max_sequences", "greater than or equal to 1"),
    "true for a number": ({"n_ctx": True}, "n_ctx", "true/false is not allowed"),
    "bad enum value": ({"quantize": "q3_x"}, "quantize", "q3_x"),
}


@pytest.mark.parametrize("kind", BAD_OVERRIDES)
async def test_a_bad_override_is_invalid_argument_before_any_load(models, kind):
    options, option, words = BAD_OVERRIDES[kind]
    error = await refused(models.LoadModel(m.LoadModelRequest(name=GGUF, options=struct(**options))))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    info = error_info(error)
    assert info.reason == "INVALID_MODEL_OPTION"
    assert (info.metadata["option"], info.metadata["field"]) == (option, f"options.{option}")
    assert info.metadata["model"] == GGUF
    assert option in error.details() and words in error.details()
    got = (await models.GetModel(m.GetModelRequest(name=GGUF))).model
    assert got.status == m.MODEL_STATUS_NOT_LOADED  # no load was tried


async def test_more_than_the_bound_of_keys_is_refused(models):
    options = {f"option_{i}": 1 for i in range(MAX_OPTION_OVERRIDES + 1)}
    error = await refused(models.LoadModel(m.LoadModelRequest(name=GGUF, options=struct(**options))))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(error).metadata["field"] == "options"
    assert f"at most {MAX_OPTION_OVERRIDES} options, got {MAX_OPTION_OVERRIDES + 1}" in error.details()


async def test_overrides_over_the_byte_bound_are_refused_unread(models):
    # One key may carry a large value (a list, a text) within the request's limit: refused by size.
    options = {"chat_template": "x" * MAX_OPTION_OVERRIDE_BYTES}
    error = await refused(models.LoadModel(m.LoadModelRequest(name=GGUF, options=struct(**options))))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(error).metadata["field"] == "options"
    assert f"options of at most {MAX_OPTION_OVERRIDE_BYTES} bytes" in error.details()
    got = (await models.GetModel(m.GetModelRequest(name=GGUF))).model
    assert got.status == m.MODEL_STATUS_NOT_LOADED


async def test_a_rule_between_options_is_named_once(models, unloaded):
    error = await refused(
        models.LoadModel(m.LoadModelRequest(name=GGUF, options=struct(max_sequences=16, n_batch=8)))
    )
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details().startswith("options: ") and "options: options" not in error.details()
    assert "n_batch" in error.details() and error_info(error).metadata["field"] == "options"


async def test_a_broken_catalog_entry_stays_the_catalogs_fault(models):
    error = await refused(models.LoadModel(m.LoadModelRequest(name=BROKEN, options=struct(n_ctx=1024))))
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert error_info(error).reason == "MODEL_SOURCE_MISSING"
