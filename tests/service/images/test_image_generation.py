"""Image generation served end to end: GenerateImage over gRPC, /v1/images/generations through the OpenAI SDK.

No image model ships offline, so the plumbing is proven on a tiny Stable Diffusion pipeline built in
the test (random weights: the pictures mean nothing; their sizes, seeds, progress and bounds do).
One server runs the model in its own backend process, as the default does, another in the
server's process; the same seed gives the same PNG from both.
"""

from __future__ import annotations

import base64
import io
import os

import grpc
import httpx
import openai
import pytest
import yaml
from PIL import Image
from universal_runtime.v1 import images_pb2, inference_service_pb2_grpc
from universal_runtime.v1.model_service_pb2 import GetModelRequest
from universal_runtime.v1.model_service_pb2_grpc import ModelServiceStub

from gateway.app import create_app
from service.server import start_server
from tests.conftest import MAX_MESSAGE_BYTES, error_info
from tests.engines.images.tiny_pipeline import build_tiny_pipeline
from tests.gateway.gateway_fakes import serve_with_uvicorn

MODEL = "tiny-sd"


@pytest.fixture(scope="module")
def image_settings(settings, tmp_path_factory):
    folder = build_tiny_pipeline(tmp_path_factory.mktemp("images") / MODEL)
    catalog = tmp_path_factory.mktemp("image-catalog") / "catalog.yaml"
    entry = {"tasks": ["generate_image"], "backend": "diffusers", "source": str(folder)}
    entry["options"] = {"threads": 1, "default_steps": 2}
    catalog.write_text(yaml.safe_dump({"models": {MODEL: entry}}))
    return settings.model_copy(
        update={
            "catalog_path": catalog,
            "grpc_port": 0,
            "preload": [],
            "image_max_pixels": 128 * 128,
            "image_max_n": 3,
            "image_max_steps": 8,
            "image_max_work": 64 * 64 * 4 * 3,
        }
    )


@pytest.fixture(scope="module", params=[True, False], ids=["backend-process", "in-process"])
async def image_server(image_settings, tmp_path_factory, request):
    running = await start_server(
        image_settings.model_copy(
            update={"backend_processes": request.param, "data_dir": tmp_path_factory.mktemp("image-data")}
        )
    )
    async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
        yield running, inference_service_pb2_grpc.InferenceServiceStub(channel)
    await running.stop(grace=1.0)


async def test_the_model_runs_in_a_backend_process_when_backends_are_on(image_server):
    running, stub = image_server
    await _generate(stub, prompt="warm up", steps=1, seed=1)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
        model = (await ModelServiceStub(channel).GetModel(GetModelRequest(name=MODEL))).model
    in_backend = running.settings.backend_processes
    assert (model.backend_process.pid > 0) is in_backend
    if in_backend:
        assert model.backend_process.pid != os.getpid()


async def _generate(stub, **fields) -> list[images_pb2.GenerateImageResponse]:
    return [m async for m in stub.GenerateImage(images_pb2.GenerateImageRequest(model=MODEL, **fields))]


async def test_each_image_streams_its_steps_then_comes_as_png(image_server):
    _, stub = image_server
    answers = await _generate(stub, prompt="a red square", n=2, steps=3, seed=7)
    progress = [(a.progress.image_index, a.progress.step) for a in answers if a.HasField("progress")]
    assert progress == [(0, 1), (0, 2), (0, 3), (1, 1), (1, 2), (1, 3)]
    images = [a.image for a in answers if a.HasField("image")]
    assert [i.seed for i in images] == [7, 8]
    for image in images:
        with Image.open(io.BytesIO(image.png)) as picture:
            assert picture.format == "PNG" and picture.size == (image.width, image.height) == (64, 64)
    # The image of seed 8 is made again alone.
    [again] = [
        a.image for a in await _generate(stub, prompt="a red square", steps=3, seed=8) if a.HasField("image")
    ]
    assert again.png == images[1].png


async def test_the_backend_process_and_the_server_draw_the_same_image(
    image_settings, tmp_path_factory, image_server
):
    _, stub = image_server
    here = [
        a.image.png for a in await _generate(stub, prompt="a cat", steps=2, seed=3) if a.HasField("image")
    ]
    other = await start_server(
        image_settings.model_copy(
            update={"backend_processes": False, "data_dir": tmp_path_factory.mktemp("image-other")}
        )
    )
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{other.port}") as channel:
            there = [
                a.image.png
                for a in await _generate(
                    inference_service_pb2_grpc.InferenceServiceStub(channel), prompt="a cat", steps=2, seed=3
                )
                if a.HasField("image")
            ]
    finally:
        await other.stop(grace=1.0)
    assert here == there and len(here) == 1


@pytest.mark.parametrize(
    ("fields", "code", "reason"),
    [
        ({"prompt": ""}, grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT"),
        ({"prompt": "x", "width": 60, "height": 64}, grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT"),
        ({"prompt": "x", "n": 4}, grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT"),
        ({"prompt": "x", "steps": 9}, grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT"),
        ({"prompt": "x", "width": 256, "height": 256}, grpc.StatusCode.RESOURCE_EXHAUSTED, "IMAGE_TOO_LARGE"),
        ({"prompt": "x", "n": 3, "steps": 8}, grpc.StatusCode.RESOURCE_EXHAUSTED, "IMAGE_TOO_LARGE"),
    ],
)
async def test_requests_over_a_bound_are_refused_before_any_step(image_server, fields, code, reason):
    _, stub = image_server
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _generate(stub, **fields)
    assert caught.value.code() == code
    assert error_info(caught.value).reason == reason


async def test_a_request_without_a_model_is_refused_when_there_is_no_default(image_server):
    _, stub = image_server
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        [m async for m in stub.GenerateImage(images_pb2.GenerateImageRequest(prompt="x"))]
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(caught.value).metadata["field"] == "model"


@pytest.fixture(scope="module")
async def images_client(image_server):
    running, _ = image_server
    app = create_app(f"127.0.0.1:{running.port}", max_message_bytes=MAX_MESSAGE_BYTES)
    async with serve_with_uvicorn(app) as url:
        yield openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)


async def test_the_openai_sdk_generates_images_as_b64_json(images_client):
    result = await images_client.images.generate(
        model=MODEL, prompt="a blue circle", n=2, size="64x64", extra_body={"steps": 2, "seed": 11}
    )
    assert len(result.data) == 2
    for item in result.data:
        with Image.open(io.BytesIO(base64.b64decode(item.b64_json))) as picture:
            assert picture.size == (64, 64)
    assert [item.model_extra["seed"] for item in result.data] == [11, 12]


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"prompt": "x", "response_format": "url"}, 400),
        ({"prompt": "x", "size": "huge"}, 400),
        ({"prompt": "x", "size": "60x64"}, 400),
        ({"prompt": "x", "size": "256x256"}, 413),
        ({"prompt": "x", "n": 3, "steps": 8}, 413),
        ({"prompt": ""}, 400),
        ({"prompt": "x", "model": "no-such-model"}, 404),
    ],
)
async def test_bad_image_requests_get_a_clear_4xx(images_client, body, status):
    async with httpx.AsyncClient(base_url=str(images_client.base_url), timeout=60) as http:
        response = await http.post("/images/generations", json={"model": MODEL, **body})
    assert response.status_code == status, response.text
    assert response.json()["error"]["message"]
