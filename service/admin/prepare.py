"""``prepare``: build the converted copies the catalog's models load from, without starting a server.

A model whose catalog entry asks for a converted copy makes it on its first load and caches it
(:mod:`engines.converted_cache`): an encoder with ``runtime: onnx``/``openvino`` is exported
(far slower than loading it from the cache), a GGUF with
``quantize`` is requantized. ``prepare`` makes those copies ahead of time (``make install`` and
the container image run it), through the engines' own code: an encoder engine is loaded on the
CPU and unloaded (its load exports, :func:`engines.encoder_runtime.export_encoder`), a GGUF copy
is made by :func:`engines.generation.requantize.model_file`. A copy already cached is reused.

A second run is quick: a GGUF copy's place in the cache follows from its source, and for an
encoder export ``prepare`` leaves a small record in the cache folder (``.prepared-<key>.json``,
keyed by backend, the weights' fingerprint, runtime and export format) naming the folder the
load read; while that folder is there, nothing is imported or loaded (sentence-transformers'
import alone takes seconds; see docs/architecture/design-notes.md#converted-copies-ahead-of-time).

Which catalog: the one the server would read (``UR_CATALOG_PATH``, else the embedded default with
the user catalog over it), or ``--catalog``. Entries that need no converted copy are left alone;
an entry that is malformed, or whose copy cannot be made, stops the command with one line.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from engines.base import ModelSpec
from engines.batching.engine import BatchedEncoderEngine
from engines.batching.options import exported_runtime
from engines.converted_cache import converted_root, source_fingerprint
from engines.encoder_runtime import EXPORT_FORMAT
from engines.errors import RuntimeServiceError
from engines.executor import DeviceExecutor
from engines.generation.options import LlamaCppOptions
from engines.generation.requantize import cached_path, model_file
from engines.options import parse_options
from engines.registry import engine_class
from engines.sources import resolve_source
from service.admin.connection import CommandError
from service.catalog import Catalog, CatalogError, load_catalog, user_catalog_path
from service.settings import Settings


@dataclass(frozen=True, slots=True)
class Preparation:
    """One catalog entry's converted copy: what it is, and the call that makes (or finds) it.

    Attributes:
        spec: the catalog entry.
        what: the copy in words (``openvino export``, ``GGUF q4_0 copy``).
        cache: the converted cache folder the copy goes in.
        find: whether the copy is in the cache already, without loading anything.
        make: builds the copy, or loads it from the cache when it is there (blocking). Returns a
            note for the report when the copy is not needed after all (the model runs on a GPU).

    """

    spec: ModelSpec
    what: str
    cache: Path
    find: Callable[[], bool]
    make: Callable[[], str | None]


def read_catalog(args: argparse.Namespace, settings: Settings) -> Catalog:
    """The catalog ``prepare`` works on: ``--catalog``, else the one the server would read.

    Raises:
        CommandError: the file is unreadable or not a catalog, or an entry is malformed.

    """
    path = Path(args.catalog).expanduser() if args.catalog else settings.catalog_path
    try:
        catalog = load_catalog(path, user_path=user_catalog_path(Path(settings.data_dir).expanduser()))
    except CatalogError as exc:
        raise CommandError(" ".join(str(exc).split())) from None
    if catalog.invalid:
        name, why = min(catalog.invalid.items())
        raise CommandError(f"model {name!r}: {' '.join(why.split())}")
    return catalog


def preparation_for(spec: ModelSpec, settings: Settings) -> Preparation | None:
    """What ``spec`` needs built before it loads quickly, or None when it loads from its source as is.

    Raises:
        RuntimeServiceError: an unknown backend, or an entry the backend's checks refuse (bad
            option, missing source, runtime package not installed).

    """
    cls = engine_class(spec.backend)
    if issubclass(cls, BatchedEncoderEngine):
        options = exported_runtime(parse_options(cls.options_model, spec.options, backend=spec.backend))
        if options is None:
            return None
        cls.check_spec(spec)
        choice, cache = options.runtime_choice, converted_root(options.cache_dir)
        fingerprint = source_fingerprint(resolve_source(spec.source).location)
        key = f"{spec.backend}|{fingerprint}|{choice.label()}|{EXPORT_FORMAT}"
        record = cache / f".prepared-{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"

        def make() -> str | None:
            note, folder = _load_encoder(cls, spec, settings)
            if folder is not None:
                _write_record(record, spec.name, folder)
            return note

        return Preparation(spec, f"{choice.label()} export", cache, lambda: _recorded(record), make)
    if spec.backend == "llama_cpp":
        gguf = parse_options(LlamaCppOptions, spec.options, backend=spec.backend)
        quantize = gguf.quantize
        if quantize is None:
            return None
        cls.check_spec(spec)
        cache = converted_root(gguf.cache_dir)
        source = resolve_source(spec.source).path
        assert source is not None  # check_spec refuses anything but a local file

        def requantize() -> None:
            model_file(source, gguf)

        def find() -> bool:
            return cached_path(source, quantize, gguf.cache_dir).is_file()

        return Preparation(spec, f"GGUF {quantize} copy", cache, find, requantize)
    if spec.backend == "transformers":
        return _transformers_copy(cls, spec)
    return None


def _transformers_copy(cls: type, spec: ModelSpec) -> Preparation | None:
    """The dequantized copy a transformers entry with ``gguf_file`` loads from.

    Without ``prepare`` a first load builds it, holding the GIL in long stretches that every other
    caller of the server waits out (see docs/architecture/design-notes.md#converted-copies-ahead-of-time).
    """
    cls.check_spec(spec)
    folder = cls(spec, "cpu", DeviceExecutor("cpu", spec.name)).converted_copy()
    if folder is None:
        return None

    def make() -> None:
        executor = DeviceExecutor("cpu", spec.name)
        try:
            cls(spec, "cpu", executor).make_converted_copy()
        finally:
            executor.shutdown(wait=False)

    return Preparation(
        spec, "dequantized GGUF copy", folder.parent, lambda: (folder / "config.json").is_file(), make
    )


def _load_encoder(
    cls: type[BatchedEncoderEngine], spec: ModelSpec, settings: Settings
) -> tuple[str | None, Path | None]:
    """Load the encoder on the device the server would pick, then unload it; its load exports.

    Returns:
        A note when there was nothing to export (on a GPU the engine keeps torch: the runtimes
        are CPU builds), and the cache folder the engine's exported model was read from.

    """
    preference = spec.device if spec.device != "auto" else settings.device
    device = cls.select_device(preference)
    if device != "cpu":
        return f"runs in torch on {device}: nothing to export", None
    executor = DeviceExecutor(device, spec.name)
    engine = cls(spec, device, executor)
    try:
        engine.configure_lane()
        engine.load()
        folder = engine.exported_path  # declared by every batched encoder: None when it stays in torch
        engine.unload()
    finally:
        executor.shutdown(wait=False)
    return None, folder


def _recorded(record: Path) -> bool:
    """Whether ``record`` (see :func:`_write_record`) names a folder that is still in the cache."""
    try:
        folder = json.loads(record.read_text(encoding="utf-8"))["folder"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return isinstance(folder, str) and bool(folder) and (record.parent / folder).is_dir()


def _write_record(record: Path, model: str, folder: Path) -> None:
    """Note that the catalog entry ``model`` loads from the cache folder ``folder`` (atomically)."""
    tmp = record.with_name(f"{record.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"model": model, "folder": folder.name}), encoding="utf-8")
    os.replace(tmp, record)


@contextlib.contextmanager
def _output_kept_back() -> Iterator[Callable[[], str]]:
    """Send everything printed meanwhile to a temporary file; yields a function returning its last line.

    Both levels are redirected: Python's ``sys.stdout``/``sys.stderr`` (torch.onnx's progress, NNCF's
    bars, warnings, log records without a handler) and file descriptors 1 and 2 (what C++ code
    writes: OpenVINO, llama.cpp's quantizer).
    """
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as kept:

        def last_line() -> str:
            kept.flush()
            kept.seek(0)
            lines = [line.strip() for line in kept.read().splitlines() if line.strip()]
            return lines[-1] if lines else ""

        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        saved = [os.dup(1), os.dup(2)]
        try:
            os.dup2(kept.fileno(), 1)
            os.dup2(kept.fileno(), 2)
            with contextlib.redirect_stdout(kept), contextlib.redirect_stderr(kept):
                yield last_line
        finally:
            kept.flush()
            for fd, original in zip((1, 2), saved, strict=True):
                os.dup2(original, fd)
                os.close(original)


def _folders(root: Path) -> set[str]:
    return {p.name for p in root.iterdir() if p.is_dir()} if root.is_dir() else set()


def _one_line(exc: BaseException) -> str:
    message = exc.message if isinstance(exc, RuntimeServiceError) else f"{type(exc).__name__}: {exc}"
    return " ".join(str(message).split())


def run_prepare(args: argparse.Namespace, out: TextIO, err: TextIO, settings: Settings) -> None:
    """Build every converted copy the catalog's models need; one line per copy on ``out``.

    Each line: ``<model>: <what> built in 34.1 s (<cache folders>)``, ``... cached`` (found
    without loading), or ``... cached (9.5 s)`` (found by loading the model), then a summary;
    ``err`` gets a line as each copy starts. Whatever the export libraries print is kept back,
    and only its last line shown, in the error, when the build fails.

    Raises:
        CommandError: the catalog is unreadable or has a malformed entry, an entry's backend or
            options are refused, or a copy could not be made.

    """
    catalog = read_catalog(args, settings)
    plans: list[Preparation] = []
    for name, spec in sorted(catalog.specs.items()):
        try:
            plan = preparation_for(spec, settings)
        except Exception as exc:  # the manager's own pre-load checks catch as widely
            raise CommandError(f"model {name!r}: {_one_line(exc)}") from None
        if plan is not None:
            plans.append(plan)
    if not plans:
        out.write(f"nothing to prepare: none of the {len(catalog.specs)} models needs a converted copy\n")
        return
    built = 0
    for plan in plans:
        name = plan.spec.name
        if plan.find():
            out.write(f"{name}: {plan.what} cached\n")
            continue
        err.write(f"{name}: preparing the {plan.what} in {plan.cache}\n")
        err.flush()
        before = _folders(plan.cache)
        started = time.perf_counter()
        # The exporters print progress of their own (torch.onnx, NNCF, llama.cpp's quantizer): kept
        # back, so that the command's output stays one line per model.
        failure = None
        with _output_kept_back() as last_line:
            try:
                note = plan.make()
            except Exception as exc:
                failure = f"model {name!r}: the {plan.what} failed: {_one_line(exc)}"
                printed = last_line()
        if failure is not None:
            detail = f" (last output: {printed[:200]})" if printed and printed not in failure else ""
            raise CommandError(failure + detail)
        seconds = time.perf_counter() - started
        if note is not None:
            out.write(f"{name}: {note}\n")
            continue
        new = sorted(_folders(plan.cache) - before)
        if new:
            built += 1
            out.write(f"{name}: {plan.what} built in {seconds:.1f} s ({', '.join(new)})\n")
        else:
            out.write(f"{name}: {plan.what} cached ({seconds:.1f} s)\n")
    out.write(f"prepared {len(plans)} model(s): {built} built, {len(plans) - built} reused from the cache\n")
