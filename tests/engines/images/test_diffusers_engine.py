"""The diffusers image engine on a tiny Stable Diffusion pipeline built in the test (CPU, about a second)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import threading
import time

import pytest

pytest.importorskip("diffusers")

from PIL import Image

from engines.base import ModelSpec
from engines.capabilities import ImageGenerator
from engines.errors import InputTooLongError, InvalidArgumentError, ModelLoadError, ResourceExhaustedError
from engines.executor import DeviceExecutor
from engines.images.diffusers_engine import DiffusersImageEngine, safetensors_weights
from engines.images.types import GeneratedImage, ImageLimits, ImageProgress, ImageRequest
from engines.reasons import Reason
from engines.registry import engine_class
from engines.types import Task
from tests.engines.images.tiny_pipeline import NATIVE_SIZE, build_tiny_pipeline

LIMITS = ImageLimits(max_pixels=128 * 128, max_n=4, max_steps=50, max_work=128 * 128 * 50 * 4)


@pytest.fixture(scope="session")
def tiny_pipeline(tmp_path_factory):
    return build_tiny_pipeline(tmp_path_factory.mktemp("images") / "tiny-sd")


@pytest.fixture(scope="session")
def engine(tiny_pipeline):
    spec = ModelSpec(
        name="tiny-sd",
        backend="diffusers",
        tasks=(Task.GENERATE_IMAGE,),
        source=str(tiny_pipeline),
        options={"threads": 2, "default_steps": 2},
    )
    executor = DeviceExecutor("cpu", "tiny-sd")
    engine = DiffusersImageEngine(spec, "cpu", executor)
    engine.load()
    yield engine
    engine.unload()
    executor.shutdown()


async def collect(engine, request, limits=LIMITS):
    async with contextlib.aclosing(engine.generate(request, limits)) as events:
        return [event async for event in events]


def test_the_backend_is_registered_and_provides_the_capability(engine):
    assert engine_class("diffusers") is DiffusersImageEngine
    assert isinstance(engine, ImageGenerator)
    assert engine.default_size == (NATIVE_SIZE, NATIVE_SIZE)
    assert engine.size_step == 8
    usage = engine.memory_usage()
    assert usage.ram_bytes > 0 and usage.vram_bytes == 0
    assert engine.estimated_load_bytes() == sum(
        p.stat().st_size for p in safetensors_weights(engine_source(engine))
    )
    assert engine.required_memory().ram_bytes == engine.estimated_load_bytes()


def engine_source(engine):
    from pathlib import Path

    return Path(engine.spec.source)


async def test_two_images_come_with_progress_for_each_step(engine):
    started = time.perf_counter()
    events = await collect(engine, ImageRequest("a cat", n=2, width=64, height=64, steps=3, seed=7))
    elapsed = time.perf_counter() - started
    progress = [e for e in events if isinstance(e, ImageProgress)]
    images = [e for e in events if isinstance(e, GeneratedImage)]
    assert [(p.image_index, p.step, p.steps) for p in progress] == [
        (i, s, 3) for i in range(2) for s in (1, 2, 3)
    ]
    # Each image comes after its own progress events.
    assert [type(e).__name__ for e in events] == (["ImageProgress"] * 3 + ["GeneratedImage"]) * 2
    assert [image.seed for image in images] == [7, 8]
    for image in images:
        assert (image.width, image.height) == (64, 64)
        decoded = Image.open(io.BytesIO(image.png))
        assert decoded.format == "PNG" and decoded.size == (64, 64) and decoded.mode == "RGB"
    print(f"\n{elapsed / 2:.3f} s per 64x64 image at 3 steps")


async def test_defaults_fill_in_and_a_random_seed_is_reported(engine):
    events = await collect(engine, ImageRequest("a dog"))
    image = events[-1]
    assert isinstance(image, GeneratedImage)
    assert (image.width, image.height) == (NATIVE_SIZE, NATIVE_SIZE)
    assert [e.step for e in events[:-1]] == [1, 2]  # default_steps
    again = await collect(engine, ImageRequest("a dog", steps=2, seed=image.seed))
    assert again[-1].png == image.png


async def test_the_same_seed_gives_the_same_image_and_another_seed_another(engine):
    request = ImageRequest("a cat", negative_prompt="a dog", width=64, height=64, steps=2, guidance_scale=5.0)
    first = (await collect(engine, ImageRequest(**{**_fields(request), "seed": 3})))[-1]
    second = (await collect(engine, ImageRequest(**{**_fields(request), "seed": 3})))[-1]
    other = (await collect(engine, ImageRequest(**{**_fields(request), "seed": 4})))[-1]
    assert first.png == second.png
    assert other.png != first.png
    # Image i of a call is the image of a call with seed + i.
    pair = await collect(engine, ImageRequest(**{**_fields(request), "seed": 3, "n": 2}))
    assert [e.png for e in pair if isinstance(e, GeneratedImage)] == [first.png, other.png]


def _fields(request):
    return {name: getattr(request, name) for name in request.__slots__}


@pytest.mark.parametrize(
    ("request_", "error", "reason", "limit"),
    [
        (ImageRequest("x", width=60, height=64), InvalidArgumentError, Reason.INVALID_ARGUMENT, None),
        (ImageRequest("x", width=64, height=0), InvalidArgumentError, Reason.INVALID_ARGUMENT, None),
        (
            ImageRequest("x", width=256, height=128),
            ResourceExhaustedError,
            Reason.IMAGE_TOO_LARGE,
            "max_pixels",
        ),
        (ImageRequest("x", n=5), InvalidArgumentError, Reason.INVALID_ARGUMENT, "max_n"),
        (ImageRequest("x", n=0), InvalidArgumentError, Reason.INVALID_ARGUMENT, "max_n"),
        (ImageRequest("x", steps=51), InvalidArgumentError, Reason.INVALID_ARGUMENT, "max_steps"),
        (ImageRequest("x", steps=0), InvalidArgumentError, Reason.INVALID_ARGUMENT, "max_steps"),
        (
            ImageRequest("x", n=4, width=128, height=128, steps=50),
            ResourceExhaustedError,
            Reason.IMAGE_TOO_LARGE,
            "max_work",
        ),
        (ImageRequest("x", guidance_scale=-1.0), InvalidArgumentError, Reason.INVALID_ARGUMENT, None),
        (ImageRequest("x", guidance_scale=float("nan")), InvalidArgumentError, Reason.INVALID_ARGUMENT, None),
        (ImageRequest("x", seed=-1), InvalidArgumentError, Reason.INVALID_ARGUMENT, None),
        (ImageRequest("x", seed=(1 << 63) - 1, n=2), InvalidArgumentError, Reason.INVALID_ARGUMENT, None),
        (ImageRequest("x" * 101), InputTooLongError, Reason.INPUT_TOO_LONG, None),
    ],
)
async def test_requests_over_a_bound_are_refused_before_any_step(
    engine, monkeypatch, request_, error, reason, limit
):
    limits = ImageLimits(
        max_pixels=128 * 128, max_n=4, max_steps=50, max_work=128 * 128 * 40, max_prompt_chars=100
    )
    ran = []
    monkeypatch.setattr(engine, "_render", lambda *args: ran.append(args))
    with pytest.raises(error) as caught:
        engine.check_request(request_, limits)
    assert caught.value.reason == reason
    if limit is not None:
        assert caught.value.metadata["limit"] == limit
    with pytest.raises(error):
        await collect(engine, request_, limits)
    assert ran == []


def test_work_within_the_bound_passes(engine):
    engine.check_request(ImageRequest("x", n=4, width=128, height=128, steps=50), LIMITS)


def test_a_default_step_count_yields_to_the_servers_limit(engine):
    plan = engine._plan(
        ImageRequest("x"), ImageLimits(max_pixels=1 << 20, max_n=1, max_steps=1, max_work=1 << 40)
    )
    assert plan.steps == 1


def test_the_sizes_option_limits_the_sizes(tiny_pipeline):
    spec = ModelSpec(
        name="sized",
        backend="diffusers",
        tasks=(Task.GENERATE_IMAGE,),
        source=str(tiny_pipeline),
        options={"sizes": ["64x64", "128x64"], "default_size": 64},
    )
    engine = DiffusersImageEngine(spec, "cpu", DeviceExecutor("cpu", "sized"))
    engine.check_request(ImageRequest("x", width=128, height=64), LIMITS)
    engine.check_request(ImageRequest("x"), LIMITS)
    with pytest.raises(InvalidArgumentError, match="sizes: 64x64, 128x64"):
        engine.check_request(ImageRequest("x", width=64, height=128), LIMITS)
    with pytest.raises(InvalidArgumentError):
        DiffusersImageEngine(
            ModelSpec(
                name="bad",
                backend="diffusers",
                tasks=(Task.GENERATE_IMAGE,),
                source=str(tiny_pipeline),
                options={"sizes": ["64*64"]},
            ),
            "cpu",
            DeviceExecutor("cpu", "bad"),
        )


def test_a_folder_with_pickled_weights_only_is_refused(tmp_path):
    folder = build_tiny_pipeline(tmp_path / "pickled", safe_serialization=False)
    # transformers writes the text encoder as safetensors whatever it is asked; the UNet is a pickle only.
    assert [p.name for p in (folder / "unet").iterdir() if "diffusion_pytorch_model" in p.name] == [
        "diffusion_pytorch_model.bin"
    ]
    spec = ModelSpec(name="pickled", backend="diffusers", tasks=(Task.GENERATE_IMAGE,), source=str(folder))
    with pytest.raises(ModelLoadError) as caught:
        DiffusersImageEngine.check_spec(spec)
    assert caught.value.reason == Reason.MODEL_SOURCE_INVALID
    engine = DiffusersImageEngine(spec, "cpu", DeviceExecutor("cpu", "pickled"))
    with pytest.raises(ModelLoadError, match="'unet' has only pickled weights"):
        engine.load()
    assert engine.pipeline is None
    assert engine.estimated_load_bytes() == 0


def test_a_folder_without_model_index_is_refused(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"")
    spec = ModelSpec(name="bare", backend="diffusers", tasks=(Task.GENERATE_IMAGE,), source=str(tmp_path))
    with pytest.raises(ModelLoadError, match=r"model_index\.json") as caught:
        DiffusersImageEngine.check_spec(spec)
    assert caught.value.reason == Reason.MODEL_SOURCE_INVALID


async def test_cancelling_the_consumer_stops_the_job_at_the_next_step(engine):
    unet_calls = []
    gate = threading.Event()

    def hold_second_step(module, args, output):
        unet_calls.append(1)
        if len(unet_calls) == 2:
            gate.wait(10)  # the consumer cancels while step 2 runs

    hook = engine.pipeline.unet.register_forward_hook(hold_second_step)
    try:
        first_progress = asyncio.Event()

        async def consume():
            async with contextlib.aclosing(
                engine.generate(ImageRequest("a cat", width=64, height=64, steps=40, seed=1), LIMITS)
            ) as events:
                async for event in events:
                    if isinstance(event, ImageProgress):
                        first_progress.set()

        consumer = asyncio.create_task(consume())
        await asyncio.wait_for(first_progress.wait(), 10)
        consumer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await consumer
        gate.set()
        # The lane is FIFO: this call's job starts once the cancelled one has stopped.
        after = await asyncio.wait_for(
            collect(engine, ImageRequest("a dog", width=64, height=64, steps=1)), 10
        )
    finally:
        hook.remove()
    assert isinstance(after[-1], GeneratedImage)
    # Step 2 finished, its callback stopped the job: the 38 steps after it never ran (+1: the call after).
    assert len(unet_calls) == 2 + 1


async def test_closing_the_iterator_between_images_queues_no_more_jobs(engine, monkeypatch):
    rendered = []
    render = engine._render
    monkeypatch.setattr(engine, "_render", lambda *args: rendered.append(args[1]) or render(*args))
    async with contextlib.aclosing(
        engine.generate(ImageRequest("a cat", n=3, width=64, height=64, steps=1, seed=10), LIMITS)
    ) as events:
        async for event in events:
            if isinstance(event, GeneratedImage):
                break
    assert rendered == [10]
