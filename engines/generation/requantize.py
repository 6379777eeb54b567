"""A GGUF file requantized once into another type, cached beside the other converted copies.

llama.cpp's batched CPU fast paths (llamafile sgemm, weight repacking) cover Q4_0, Q8_0 and F16
but not Q4_1, so a Q4_1 file gains far less from batching many sequences than the same weights in
Q4_0 (``bench/README.md``, GGUF quality table). The ``llama_cpp`` backend's ``quantize`` catalog
option names the type to serve; the first load writes the copy with ``llama_model_quantize``
(``allow_requantize``: the source is already quantized) and later loads reuse it.

The copy lives in a folder of the converted cache (:mod:`engines.converted_cache`) named by the
source file's identity (:func:`~engines.converted_cache.source_fingerprint`: path, size, content)
and the target type, and is made by :func:`~engines.converted_cache.build_once`: in a temporary
folder renamed into place, under a file lock, so that two loads (two models of one file, or two
server processes sharing the cache) never quantize the same file twice.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from engines.converted_cache import build_once, converted_root, source_fingerprint, source_identity
from engines.generation.options import LlamaCppOptions, QuantizeType

log = logging.getLogger(__name__)

#: The ``quantize`` option's values (:data:`~engines.generation.options.QuantizeType`) and their
#: ``llama_ftype`` (``LLAMA_FTYPE_MOSTLY_*`` in llama.h): types whose batched matrix products
#: llama.cpp speeds up on CPU. F16 holds a 4-bit file's weights exactly (at about 2.7 times the
#: size): the lossless one.
QUANTIZE_TYPES: dict[QuantizeType, int] = {"q4_0": 2, "q8_0": 7, "f16": 1}


def llama_quantize(source: Path, target: Path, ftype: int) -> None:
    """Write ``source`` requantized to ``ftype`` at ``target`` with llama.cpp's ``llama_model_quantize``.

    Raises:
        RuntimeError: llama.cpp reported a failure (its log says why).

    """
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.allow_requantize = True  # the source is already quantized
    status = llama_cpp.llama_model_quantize(str(source).encode(), str(target).encode(), params)
    if status != 0:
        raise RuntimeError(f"llama_model_quantize({source} -> {target}) failed with status {status}")


def cached_path(source: Path, quantize: str, cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Where the ``quantize`` copy of ``source`` is cached (it may not exist yet).

    ``<cache>/<source stem>-<type>-<fingerprint>/<source stem>-<type>.gguf``.

    Raises:
        OSError: ``source`` cannot be read.

    """
    folder = converted_root(cache_dir) / f"{source.stem}-{quantize}-{source_fingerprint(source)}"
    return folder / f"{source.stem}-{quantize}.gguf"


def requantized(
    source: Path,
    quantize: QuantizeType,
    cache_dir: str | os.PathLike[str] | None = None,
    quantizer: Callable[[Path, Path, int], None] = llama_quantize,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """The GGUF to load for ``source`` served as ``quantize``: the cached copy, made on first use.

    Args:
        source: The GGUF file as the catalog names it.
        quantize: A key of :data:`QUANTIZE_TYPES` (the ``quantize`` option, typed).
        cache_dir: The cache folder (default :func:`engines.converted_cache.converted_root`).
        quantizer: ``quantizer(source, target, ftype)`` writes the copy (tests pass a stand-in).
        progress: the loading engine's :meth:`~engines.base.Engine.report_progress`: told
            ``"converting"`` while the copy is made (not when it is cached).

    Raises:
        ValueError: ``quantize`` is not an allowed type.
        OSError: the cache folder cannot be written.
        RuntimeError: quantizing failed (nothing is left in the cache).

    """
    if quantize not in QUANTIZE_TYPES:
        raise ValueError(f"quantize must be one of {', '.join(QUANTIZE_TYPES)}, got {quantize!r}")
    ftype = QUANTIZE_TYPES[quantize]
    target = cached_path(source, quantize, cache_dir)
    start = time.monotonic()
    identity = f"{source_identity(source)}|{quantize}"
    if build_once(
        target.parent, lambda folder: quantizer(source, folder / target.name, ftype), progress, identity
    ):
        elapsed = time.monotonic() - start
        log.info("requantized %s to %s in %.1f s (cached in %s)", source, quantize, elapsed, target)
    return target


def model_file(source: Path, options: LlamaCppOptions, progress: Callable[[str], None] | None = None) -> Path:
    """The file llama.cpp loads for a catalog entry's GGUF ``source`` and typed ``options``.

    ``source`` itself, or its cached copy of type ``options.quantize`` (made now when missing; in
    ``options.cache_dir`` when set; ``progress`` hears ``"converting"`` meanwhile).

    Raises:
        OSError: the cache folder cannot be written.
        RuntimeError: quantizing failed.

    """
    if options.quantize is None:
        return source
    return requantized(source, options.quantize, options.cache_dir, progress=progress)
