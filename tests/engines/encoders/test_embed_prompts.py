"""``EmbedRequest.prompt_name`` on real MiniLM: the named prompt of the model is prefixed to each input.

sentence-transformers reads a model's named prompts from its ``config_sentence_transformers.json``
(``"prompts": {"query": "query: "}``). The packaged all-MiniLM-L6-v2 defines none, so this module
serves a copy of it (links to the same weights) whose config defines two, on a server of its own;
the shared server's packaged MiniLM is the reference without prompts.
"""

from __future__ import annotations

import json

import grpc
import numpy as np
import pytest
import yaml
from universal_runtime.v1 import encoders_pb2 as e
from universal_runtime.v1 import inference_service_pb2_grpc

from service.server import start_server
from tests.conftest import EMBED_MODEL, error_info
from tests.engines.encoders.conftest import minilm_dir

PROMPTED = "minilm-with-prompts"
PROMPTS = {"query": "query: ", "passage": "passage: "}
CONFIG = "config_sentence_transformers.json"


@pytest.fixture(scope="module")
def prompted_minilm(tmp_path_factory):
    """MiniLM's folder with its files linked and a config that adds ``PROMPTS``."""
    source = minilm_dir()
    out = tmp_path_factory.mktemp("minilm-prompts")
    for item in source.iterdir():
        if item.name != CONFIG:
            (out / item.name).symlink_to(item, target_is_directory=item.is_dir())
    config = json.loads((source / CONFIG).read_text()) if (source / CONFIG).exists() else {}
    assert not config.get("prompts"), "the packaged model now has prompts; this copy is not needed"
    (out / CONFIG).write_text(json.dumps({**config, "prompts": PROMPTS, "default_prompt_name": None}))
    return out


@pytest.fixture(scope="module")
async def stub(settings, prompted_minilm, tmp_path_factory):
    catalog = tmp_path_factory.mktemp("prompt-catalog") / "catalog.yaml"
    models = {
        PROMPTED: {"tasks": ["embed"], "backend": "sentence_transformers", "source": str(prompted_minilm)},
    }
    catalog.write_text(yaml.safe_dump({"models": models}))
    running = await start_server(settings.model_copy(update={"grpc_port": 0, "catalog_path": catalog}))
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
            yield inference_service_pb2_grpc.InferenceServiceStub(channel)
    finally:
        await running.stop(grace=1.0)


async def embed(stub, model: str, texts: list[str], **options) -> tuple[np.ndarray, e.EmbedResponse]:
    response = await stub.Embed(e.EmbedRequest(model=model, inputs=texts, normalize=True, **options))
    vectors = np.array([list(item.values) for item in response.embeddings], dtype=np.float32)
    return vectors, response


async def test_prompt_name_prefixes_the_named_prompt(stub):
    texts = ["x", "how do I reset my password"]
    named, named_response = await embed(stub, PROMPTED, texts, prompt_name="query")
    literal, literal_response = await embed(stub, PROMPTED, [f"query: {t}" for t in texts])
    plain, plain_response = await embed(stub, PROMPTED, texts)
    cosine_literal = np.sum(named * literal, axis=1)
    cosine_plain = np.sum(named * plain, axis=1)
    assert np.all(cosine_literal > 0.9999), cosine_literal
    assert np.all(cosine_plain < 0.99), cosine_plain
    # The prompt's tokens are counted as input, exactly as when the client writes them out.
    assert named_response.usage.prompt_tokens == literal_response.usage.prompt_tokens
    assert named_response.usage.prompt_tokens > plain_response.usage.prompt_tokens


async def test_each_prompt_name_uses_its_own_prompt(stub, inference):
    query, _ = await embed(stub, PROMPTED, ["x"], prompt_name="query")
    passage, _ = await embed(stub, PROMPTED, ["x"], prompt_name="passage")
    literal, _ = await embed(stub, PROMPTED, ["passage: x"])
    assert float(passage[0] @ literal[0]) > 0.9999
    assert float(passage[0] @ query[0]) < 0.99
    # The same weights without prompts: a plain input embeds identically in both models.
    ours, _ = await embed(stub, PROMPTED, ["x"])
    packaged, _ = await embed(inference, EMBED_MODEL, ["x"])  # the shared server's packaged MiniLM
    assert float(ours[0] @ packaged[0]) > 0.9999


@pytest.mark.parametrize("model", [PROMPTED, EMBED_MODEL])
async def test_unknown_prompt_name_is_invalid_argument(stub, inference, model):
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await embed(stub if model == PROMPTED else inference, model, ["x"], prompt_name="search_query")
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, caught.value.details()
    assert error_info(caught.value).metadata["field"] == "prompt_name"
    assert "search_query" in caught.value.details()
    if model == PROMPTED:  # the message lists the prompts the model has
        assert "passage, query" in caught.value.details()


async def test_prompt_name_and_prompt_together_are_invalid(stub):
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await embed(stub, PROMPTED, ["x"], prompt_name="query", prompt="query: ")
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
