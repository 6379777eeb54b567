"""Text to image with a diffusers pipeline (Stable Diffusion 1.x/2.x, SDXL and the like).

The source is a diffusers pipeline folder (``model_index.json`` and one folder per part) or a hub
id of the operator's; :class:`diffusers.DiffusionPipeline` picks the pipeline class the folder
names. Only safetensors weights are read: a folder whose parts hold pickles alone (``.bin``,
``.ckpt``) is refused before anything is loaded, and the loader runs with ``use_safetensors=True``
so it never falls back to unpickling.

Each image is one lane job (text encoding, the denoising loop, the VAE decode and the PNG
encoding), so other callers' jobs interleave between images. The pipeline's step callback
reports each finished step to the caller's event loop and stops the job at the next step once
the caller has gone away. Every bound (pixels, images, steps, pixel-steps) is checked before the
first job is queued.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import io
import json
import secrets
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

from pydantic import Field

from engines.base import Engine, ModelSpec
from engines.device import torch_dtype_for, torch_module_memory
from engines.errors import InputTooLongError, InvalidArgumentError, ModelLoadError, ResourceExhaustedError
from engines.executor import DeviceExecutor
from engines.hf_construction import hf_construction
from engines.images.types import MAX_SEED, GeneratedImage, ImageLimits, ImageProgress, ImageRequest
from engines.options import OVERRIDE, AtLeastOne, NonEmptyStr, TorchDtype, TorchEngineOptions
from engines.reasons import Reason
from engines.registry import register_backend
from engines.sources import resolve_source
from engines.types import MemoryUsage, Task

if TYPE_CHECKING:
    from diffusers import DiffusionPipeline

SIZE_STEP = 8
"""Image sides must be multiples of this (or of the pipeline's VAE scale factor, if larger):
latents are the image scaled down by the VAE's factor, 8 for Stable Diffusion."""
FALLBACK_SIZE = 512
"""Default image side of a pipeline that names no native size (``default_size`` unset)."""
MAX_GUIDANCE_SCALE = 100.0
"""Largest guidance scale accepted (pipelines use 0-20; far above that the images are noise)."""
PICKLE_SUFFIXES = frozenset({".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle"})
"""Weight files that load by unpickling (code execution): never read."""
RANDOM_SEED_RANGE = 1 << 32
"""Random seeds are drawn below this: short enough to copy from a response into a request."""

# The pipeline's ``__call__`` must take these to serve text-to-image with progress and seeds.
_REQUIRED_CALL_PARAMETERS = frozenset(
    {"prompt", "width", "height", "num_inference_steps", "generator", "callback_on_step_end"}
)


class DiffusersOptions(TorchEngineOptions):
    """Options of the ``diffusers`` backend (defaults of a request, the weights' dtype and variant)."""

    dtype: Annotated[TorchDtype | None, OVERRIDE] = None
    """Torch compute dtype of the weights; unset: bfloat16 on CUDA with bf16 support, else float16
    on CUDA and MPS, float32 on the CPU."""
    variant: NonEmptyStr | None = None
    """Weights variant to load (``fp16`` reads ``*.fp16.safetensors``); unset: the plain files."""
    default_steps: AtLeastOne = 20
    """Denoising steps of a request that names none (lowered to the server's max_steps)."""
    default_guidance_scale: Annotated[float, Field(ge=0, le=MAX_GUIDANCE_SCALE)] | None = None
    """Guidance scale of a request that names none; unset: the pipeline's own default (7.5 for
    Stable Diffusion)."""
    default_size: Annotated[int, Field(ge=SIZE_STEP, multiple_of=SIZE_STEP)] | None = None
    """Width and height in pixels of a request that names no size; unset: the pipeline's native
    size (512 for Stable Diffusion 1.5, 1024 for SDXL)."""
    sizes: tuple[Annotated[str, Field(pattern=r"^[1-9][0-9]{0,5}x[1-9][0-9]{0,5}$")], ...] = ()
    """Sizes a request may ask for, as ``WIDTHxHEIGHT`` in pixels (``512x512``); empty: any size
    that is a multiple of 8 within the server's limits."""


@dataclass(frozen=True, slots=True)
class _Plan:
    """A checked request with the model's defaults filled in."""

    prompt: str
    negative_prompt: str
    n: int
    width: int
    height: int
    steps: int
    guidance_scale: float | None
    seed: int | None


class _DenoisingCancelled(Exception):
    """Raised from the step callback to stop a job whose caller has gone away."""


def _model_index(folder: Path) -> dict[str, Any]:
    """The parsed ``model_index.json`` of a pipeline folder.

    Raises:
        ModelLoadError: the folder has none, or it is not a JSON object (MODEL_SOURCE_INVALID).

    """
    path = folder / "model_index.json"
    try:
        index = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelLoadError(
            f"model source {folder} is not a diffusers pipeline folder: it has no model_index.json",
            reason=Reason.MODEL_SOURCE_INVALID,
        ) from None
    except (OSError, ValueError) as exc:
        raise ModelLoadError(
            f"model source {folder}: model_index.json is unreadable ({exc})",
            reason=Reason.MODEL_SOURCE_INVALID,
        ) from None
    if not isinstance(index, dict):
        raise ModelLoadError(
            f"model source {folder}: model_index.json is not a JSON object",
            reason=Reason.MODEL_SOURCE_INVALID,
        )
    return index


def _component_names(index: dict[str, Any]) -> list[str]:
    """Parts the pipeline loads from sub-folders: ``model_index.json`` keys with a ``[library, class]``."""
    return [
        name
        for name, value in index.items()
        if not name.startswith("_") and isinstance(value, list) and len(value) == 2 and value[0] is not None
    ]


def _matches_variant(path: Path, variant: str | None) -> bool:
    """Whether a safetensors file is of ``variant`` (``x.fp16.safetensors``) or plain (``x.safetensors``)."""
    infixes = path.name.split(".")[1:-1]
    if variant is None:
        return not infixes
    return any(part == variant or part.startswith(f"{variant}-") for part in infixes)


def safetensors_weights(folder: Path, variant: str | None = None) -> list[Path]:
    """The safetensors files of a pipeline folder that a load with ``variant`` reads.

    Raises:
        ModelLoadError: reason MODEL_SOURCE_INVALID when the folder is not a pipeline folder, a part
            holds pickled weights (``.bin``, ``.ckpt``...) and no safetensors, or the
            folder has no safetensors weights at all.

    """
    index = _model_index(folder)
    found: list[Path] = []
    for name in _component_names(index):
        part = folder / name
        if not part.is_dir():
            continue
        files = [path for path in part.rglob("*") if path.is_file()]
        safe = [path for path in files if path.suffix == ".safetensors"]
        pickled = [path for path in files if path.suffix in PICKLE_SUFFIXES]
        if pickled and not safe:
            raise ModelLoadError(
                f"model source {folder}: part {name!r} has only pickled weights ({pickled[0].name}); "
                "pickles are never loaded: convert them to safetensors",
                reason=Reason.MODEL_SOURCE_INVALID,
                component=name,
            )
        # A part without files of the variant loads its plain ones (diffusers falls back to them).
        found += [path for path in safe if _matches_variant(path, variant)] or [
            path for path in safe if _matches_variant(path, None)
        ]
    if not found:
        raise ModelLoadError(
            f"model source {folder} has no safetensors weights"
            + (f" of variant {variant!r}" if variant else ""),
            reason=Reason.MODEL_SOURCE_INVALID,
        )
    return found


def _parse_size(text: str) -> tuple[int, int]:
    width, _, height = text.partition("x")
    return int(width), int(height)


@register_backend
class DiffusersImageEngine(Engine[DiffusersOptions]):
    """Images from a diffusers text-to-image pipeline; see the module docstring.

    Catalog options: :class:`DiffusersOptions`. Provides
    :class:`~engines.capabilities.ImageGenerator`.
    """

    backend = "diffusers"
    tasks = frozenset({Task.GENERATE_IMAGE})
    runs_torch = True
    runs_in_backend_process = True

    def __init__(self, spec: ModelSpec, device: str, executor: DeviceExecutor) -> None:
        super().__init__(spec, device, executor)
        self.pipeline: DiffusionPipeline | None = None
        self.size_step = SIZE_STEP
        self.default_size = (self.options.default_size or FALLBACK_SIZE,) * 2
        self.sizes = frozenset(_parse_size(size) for size in self.options.sizes)
        self.call_parameters: frozenset[str] = frozenset()

    @classmethod
    def check_spec(cls, spec: ModelSpec) -> None:
        """The base checks, and a local source must be a pipeline folder with safetensors weights.

        Raises:
            ModelLoadError: MODEL_SOURCE_MISSING or MODEL_SOURCE_INVALID (see :func:`safetensors_weights`).
            InvalidArgumentError: an invalid option (INVALID_MODEL_OPTION).

        """
        super().check_spec(spec)
        resolved = resolve_source(spec.source)
        if resolved.path is not None:
            variant = spec.options.get("variant")
            safetensors_weights(resolved.path, variant if isinstance(variant, str) else None)

    # -- loading ---------------------------------------------------------------------------------

    def load(self) -> None:
        """Load the pipeline onto the device (safetensors only; local files only for a folder).

        Raises:
            ModelLoadError: a folder with pickled weights only or no model_index.json, or a pipeline
                that is not text-to-image (MODEL_SOURCE_INVALID).
            Exception: whatever diffusers raises for a missing or broken pipeline.

        """
        from diffusers import DiffusionPipeline

        resolved = resolve_source(self.spec.source)
        kwargs: dict[str, Any] = {}
        if resolved.path is not None:
            safetensors_weights(resolved.path, self.options.variant)
            index = _model_index(resolved.path)
            # A pipeline saved without a safety checker says so ([null, null]); passing None then
            # keeps diffusers from warning, and never fetches one. A configured one loads as saved.
            if "safety_checker" in index and "safety_checker" not in _component_names(index):
                kwargs["safety_checker"] = None
        if self.options.variant is not None:
            kwargs["variant"] = self.options.variant
        with hf_construction():  # its text encoders are transformers models: engines/hf_construction.py
            pipeline = DiffusionPipeline.from_pretrained(
                resolved.location,
                dtype=torch_dtype_for(self.device, self.options.dtype),
                use_safetensors=True,
                local_files_only=resolved.path is not None,
                **kwargs,
            )
        parameters = frozenset(inspect.signature(pipeline.__call__).parameters)
        missing = _REQUIRED_CALL_PARAMETERS - parameters
        if missing:
            raise ModelLoadError(
                f"model {self.spec.name!r}: {type(pipeline).__name__} is not a text-to-image pipeline "
                f"this backend can run (its call lacks {', '.join(sorted(missing))})",
                reason=Reason.MODEL_SOURCE_INVALID,
                model=self.spec.name,
            )
        pipeline.to(self.device)
        pipeline.set_progress_bar_config(disable=True)
        factor = int(getattr(pipeline, "vae_scale_factor", SIZE_STEP) or SIZE_STEP)
        self.size_step = max(SIZE_STEP, factor)
        native = self._native_size(pipeline, factor)
        side = self.options.default_size or native
        self.default_size = (side, side)
        self.call_parameters = parameters
        self.pipeline = pipeline

    @staticmethod
    def _native_size(pipeline: Any, factor: int) -> int:
        """The side the pipeline was trained at: its latent sample size times the VAE factor."""
        sample = getattr(pipeline, "default_sample_size", None)
        if not isinstance(sample, int):
            denoiser = getattr(pipeline, "unet", None) or getattr(pipeline, "transformer", None)
            sample = getattr(getattr(denoiser, "config", None), "sample_size", None)
        if isinstance(sample, int) and sample > 0 and sample * factor % SIZE_STEP == 0:
            return sample * factor
        return FALLBACK_SIZE

    def unload(self) -> None:
        """Drop the pipeline."""
        self.pipeline = None

    def memory_usage(self) -> MemoryUsage:
        """Parameter and buffer bytes of the pipeline's torch parts, by device."""
        import torch

        if self.pipeline is None:
            return MemoryUsage()
        ram = vram = 0
        for part in self.pipeline.components.values():
            if isinstance(part, torch.nn.Module):
                part_ram, part_vram = torch_module_memory(part)
                ram, vram = ram + part_ram, vram + part_vram
        return MemoryUsage(ram_bytes=ram, vram_bytes=vram)

    def estimated_load_bytes(self) -> int:
        """Bytes of the safetensors files a load reads (a local folder), else 0 (unknown).

        The weights take about their files' size once loaded in the dtype they were saved in.
        """
        resolved = resolve_source(self.spec.source)
        if resolved.path is None:
            return 0
        try:
            files = safetensors_weights(resolved.path, self.options.variant)
        except ModelLoadError:
            return 0  # the load itself reports why
        return sum(path.stat().st_size for path in files)

    # -- the capability --------------------------------------------------------------------------

    def check_request(self, request: ImageRequest, limits: ImageLimits) -> None:
        """Refuse a request the model cannot or may not run (cheap; no lane job).

        Raises:
            InvalidArgumentError: see :meth:`ImageGenerator.generate
                <engines.capabilities.ImageGenerator.generate>`.
            InputTooLongError: a prompt over ``limits.max_prompt_chars``.
            ResourceExhaustedError: over ``limits.max_pixels`` or ``limits.max_work`` (IMAGE_TOO_LARGE).

        """
        self._plan(request, limits)

    async def generate(
        self, request: ImageRequest, limits: ImageLimits
    ) -> AsyncIterator[ImageProgress | GeneratedImage]:
        """Each image's :class:`ImageProgress` events, then its :class:`GeneratedImage`, for ``n`` images.

        Image ``i`` is made with seed ``request.seed + i`` (a random first seed when None), so
        one image of a call is made again by a call with its seed and n=1. Use with
        ``contextlib.aclosing``: closing the iterator or cancelling its consumer stops the
        running job at its next denoising step.

        Raises:
            InvalidArgumentError, InputTooLongError, ResourceExhaustedError: as :meth:`check_request`,
                before any job is queued.

        """
        plan = self._plan(request, limits)
        first = plan.seed if plan.seed is not None else secrets.randbelow(RANDOM_SEED_RANGE)
        for index in range(plan.n):
            async for event in self._one_image(plan, first + index, index):
                yield event

    async def _one_image(
        self, plan: _Plan, seed: int, index: int
    ) -> AsyncIterator[ImageProgress | GeneratedImage]:
        """Run one image's job, yielding its progress as it comes and then the image."""
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[object] = asyncio.Queue()
        done = object()
        cancelled = threading.Event()

        def report(progress: ImageProgress) -> None:  # on the lane's thread
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody is listening
                loop.call_soon_threadsafe(events.put_nowait, progress)

        job = asyncio.ensure_future(self.executor.run(self._render, plan, seed, index, report, cancelled))
        # Queued after every progress event the job scheduled (both go through the loop's FIFO).
        job.add_done_callback(lambda _: events.put_nowait(done))
        try:
            while (event := await events.get()) is not done:
                yield cast(ImageProgress, event)
            yield job.result()
        finally:
            # The caller left (or the image is out): a running job stops at its next step, a
            # queued one never starts.
            cancelled.set()
            job.cancel()

    def _render(
        self,
        plan: _Plan,
        seed: int,
        index: int,
        report: Callable[[ImageProgress], None],
        cancelled: threading.Event,
    ) -> GeneratedImage:
        """Make one image and encode it as PNG (blocking; one lane job).

        Raises:
            _DenoisingCancelled: ``cancelled`` was set before or during denoising.

        """
        import torch

        pipeline = self.pipeline
        if cancelled.is_set():
            raise _DenoisingCancelled
        if pipeline is None:
            raise RuntimeError(f"model {self.spec.name!r} is not loaded")
        # A CPU generator gives the same initial noise for a seed on every device.
        generator = torch.Generator(device="cpu").manual_seed(seed)

        def on_step_end(pipe: Any, step: int, timestep: Any, tensors: dict[str, Any]) -> dict[str, Any]:
            if cancelled.is_set():
                raise _DenoisingCancelled  # skips the remaining steps and the VAE decode
            total = getattr(pipe, "num_timesteps", None) or plan.steps
            report(ImageProgress(step=step + 1, steps=int(total), image_index=index))
            return {}

        kwargs: dict[str, Any] = {
            "prompt": plan.prompt,
            "width": plan.width,
            "height": plan.height,
            "num_inference_steps": plan.steps,
            "generator": generator,
            "callback_on_step_end": on_step_end,
            "num_images_per_prompt": 1,
            "output_type": "pil",
        }
        if plan.guidance_scale is not None:
            kwargs["guidance_scale"] = plan.guidance_scale
        if plan.negative_prompt:
            kwargs["negative_prompt"] = plan.negative_prompt
        kwargs = {key: value for key, value in kwargs.items() if key in self.call_parameters}
        image = pipeline(**kwargs).images[0]
        buffer = io.BytesIO()
        image.convert("RGB").save(buffer, format="PNG")
        return GeneratedImage(png=buffer.getvalue(), seed=seed, width=image.width, height=image.height)

    # -- request checks --------------------------------------------------------------------------

    def _plan(self, request: ImageRequest, limits: ImageLimits) -> _Plan:
        """The request checked against the model and ``limits``, with the model's defaults filled in."""
        n = request.n
        if n < 1 or n > limits.max_n:
            raise InvalidArgumentError(
                f"n must be from 1 to {limits.max_n} images, got {n}", limit="max_n", n=n
            )
        if request.steps is None:
            steps = min(self.options.default_steps, limits.max_steps)  # a default yields to the limit
        else:
            steps = request.steps
            if steps < 1 or steps > limits.max_steps:
                raise InvalidArgumentError(
                    f"steps must be from 1 to {limits.max_steps}, got {steps}", limit="max_steps", steps=steps
                )
        width = self.default_size[0] if request.width is None else request.width
        height = self.default_size[1] if request.height is None else request.height
        step = self.size_step
        for name, side in (("width", width), ("height", height)):
            if side < step or side % step:
                raise InvalidArgumentError(
                    f"{name} must be a positive multiple of {step} pixels, got {side}", **{name: side}
                )
        if self.sizes and (width, height) not in self.sizes:
            allowed = ", ".join(f"{w}x{h}" for w, h in sorted(self.sizes))
            raise InvalidArgumentError(
                f"size {width}x{height} is not one model {self.spec.name!r} makes; sizes: {allowed}",
                size=f"{width}x{height}",
            )
        pixels = width * height
        if pixels > limits.max_pixels:
            raise ResourceExhaustedError(
                f"a {width}x{height} image has {pixels} pixels, over the limit of {limits.max_pixels}",
                reason=Reason.IMAGE_TOO_LARGE,
                limit="max_pixels",
                pixels=pixels,
                max_pixels=limits.max_pixels,
            )
        work = pixels * steps * n
        if work > limits.max_work:
            raise ResourceExhaustedError(
                f"{n} image(s) of {width}x{height} at {steps} steps are {work} pixel-steps, over the limit "
                f"of {limits.max_work}; ask for fewer images, steps or pixels",
                reason=Reason.IMAGE_TOO_LARGE,
                limit="max_work",
                work=work,
                max_work=limits.max_work,
            )
        for name, text in (("prompt", request.prompt), ("negative_prompt", request.negative_prompt)):
            if len(text) > limits.max_prompt_chars:
                raise InputTooLongError(
                    f"{name} has {len(text)} characters, over the limit of {limits.max_prompt_chars}",
                    field=name,
                )
        if request.negative_prompt and "negative_prompt" not in self.call_parameters and self.pipeline:
            raise InvalidArgumentError(
                f"model {self.spec.name!r} takes no negative_prompt", field="negative_prompt"
            )
        guidance = request.guidance_scale
        if guidance is None:
            guidance = self.options.default_guidance_scale
        elif not 0 <= guidance <= MAX_GUIDANCE_SCALE:  # also refuses NaN
            raise InvalidArgumentError(
                f"guidance_scale must be from 0 to {MAX_GUIDANCE_SCALE:g}, got {guidance}",
                guidance_scale=guidance,
            )
        seed = request.seed
        if seed is not None and not 0 <= seed <= MAX_SEED - (n - 1):
            raise InvalidArgumentError(
                f"seed must be from 0 to {MAX_SEED - (n - 1)} (seed + n - 1 at most {MAX_SEED}), got {seed}",
                seed=seed,
            )
        return _Plan(
            prompt=request.prompt,
            negative_prompt=request.negative_prompt,
            n=n,
            width=width,
            height=height,
            steps=steps,
            guidance_scale=guidance,
            seed=seed,
        )
