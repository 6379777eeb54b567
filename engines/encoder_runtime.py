"""Encoder models run by ONNX Runtime or OpenVINO instead of eager torch (catalog ``runtime``/``quantize``).

The transformers model inside an encoder engine (the ``Transformer`` module of a
sentence-transformers model, or a sequence classifier) is exported once to ONNX with torch's own
exporter (``torch.onnx.export``, dynamo), optionally quantized to int8 (ONNX Runtime's
``quantize_dynamic``; NNCF's int8 weight compression for OpenVINO), converted for OpenVINO with
``openvino.convert_model``, and cached (:mod:`engines.converted_cache`). An :class:`ExportedModel`
then takes the torch model's place: same keyword inputs, same output field, so tokenization,
pooling, normalization and our dynamic batching stay exactly as they are with torch.

Why not sentence-transformers' ``backend=`` or optimum: every optimum release on PyPI
(optimum-onnx 0.1.0, optimum-intel 2.2.0) pins transformers below 4.58 or 5.6 and fails to
import with the transformers 5 this project installs, and sentence-transformers' backends load
through optimum's classes.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from engines.converted_cache import build_once, converted_root, source_fingerprint, source_identity
from engines.errors import FailedPreconditionError
from engines.reasons import Reason

log = logging.getLogger(__name__)

Runtime = Literal["torch", "onnx", "openvino"]
"""Values of the catalog option ``runtime`` (what runs an encoder's forward pass)."""
Quantization = Literal["none", "int8"]
"""Values of the catalog option ``quantize`` (int8: weights quantized by the exported runtime)."""
# Python modules each accelerated runtime needs (export and run), and the extra that installs them.
_NEEDS = {
    ("onnx", "none"): ("onnx", "onnxscript", "onnxruntime"),
    ("onnx", "int8"): ("onnx", "onnxscript", "onnxruntime"),
    ("openvino", "none"): ("onnx", "onnxscript", "openvino"),
    ("openvino", "int8"): ("onnx", "onnxscript", "openvino", "nncf"),
}
# Bump when the export changes in a way that makes old cached copies wrong.
EXPORT_FORMAT = 1
META_FILE = "export.json"


@dataclass(frozen=True, slots=True)
class RuntimeChoice:
    """How an encoder's forward pass runs: ``runtime`` (torch, onnx, openvino), ``quantize`` (none, int8).

    Read from the catalog by the encoders' options models (:mod:`engines.batching.options`), which
    check the values and that int8 comes with onnx or openvino.
    """

    runtime: Runtime = "torch"
    quantize: Quantization = "none"

    @property
    def exported(self) -> bool:
        """Whether the model runs outside torch (and so needs an export)."""
        return self.runtime != "torch"

    def check_installed(self) -> None:
        """Cheap check that the runtime's packages are importable (no import, so no start-up cost).

        Raises:
            FailedPreconditionError: a package is missing (reason RUNTIME_NOT_INSTALLED), naming
                the packages and the extra that installs them.

        """
        if not self.exported:
            return
        missing = [
            name for name in _NEEDS[self.runtime, self.quantize] if importlib.util.find_spec(name) is None
        ]
        if missing:
            raise FailedPreconditionError(
                f"runtime {self.runtime} (quantize {self.quantize}) needs the Python packages "
                f"{', '.join(missing)}: pip install 'universal-runtime[{self.runtime}]'",
                reason=Reason.RUNTIME_NOT_INSTALLED,
                runtime=self.runtime,
            )

    def label(self) -> str:
        """``onnx``, ``openvino-int8``…: for folder names and logs."""
        return self.runtime if self.quantize == "none" else f"{self.runtime}-{self.quantize}"


@dataclass(eq=False)
class ExportedModel:
    """Runs an exported encoder; called like the transformers model it replaces.

    ``model(**features)`` takes the tokenizer's torch tensors (extra keys are ignored) and returns
    a dict with one field, ``output`` (``last_hidden_state`` or ``logits``), as a float32 CPU
    tensor of the torch model's shape. Built by :func:`export_encoder`; not thread-safe (the
    engine's batcher runs one batch at a time on the model's lane).

    Attributes:
        run: the runtime's session call: named int64 arrays in, the output array out.
        inputs: the input names the exported graph takes.
        output: the output's name.
        config: the replaced model's ``PretrainedConfig`` (callers read sizes and labels from it).
        path: the cached folder the model was read from.
        nbytes: size of that folder's files, an estimate of the memory the runtime holds.

    """

    run: Callable[[dict[str, np.ndarray]], np.ndarray]
    inputs: list[str]
    output: str
    config: Any
    path: Path
    nbytes: int = field(init=False)

    def __post_init__(self) -> None:
        self.nbytes = sum(p.stat().st_size for p in self.path.iterdir() if p.is_file())

    def forward(self, **features: Any) -> dict[str, Any]:
        """One forward pass: int64 arrays in, ``{output: float32 tensor}`` out."""
        import torch

        arrays = {name: _int64(features[name]) for name in self.inputs}
        return {self.output: torch.from_numpy(np.ascontiguousarray(self.run(arrays), dtype=np.float32))}

    __call__ = forward  # sentence-transformers looks the method up by name; other callers call the model

    # The code that held the torch model may switch it to evaluation mode or move it; a no-op here.
    def eval(self) -> ExportedModel:
        """Return self (an exported model is always in inference mode)."""
        return self


def _int64(tensor: Any) -> np.ndarray:
    return np.asarray(tensor.detach().cpu().numpy() if hasattr(tensor, "detach") else tensor, dtype=np.int64)


def export_encoder(
    model: Any,
    sample: Mapping[str, Any],
    output: str,
    *,
    choice: RuntimeChoice,
    source: str,
    cache_dir: str | None,
    threads: int,
    progress: Callable[[str], None] | None = None,
) -> ExportedModel:
    """The exported copy of ``model`` for ``choice``, from the cache or exported now (then cached).

    Args:
        model: the torch transformers model (float32, CPU) called with keyword tensors.
        sample: a tokenizer's output for two texts of different lengths (padded; the export
            traces it, batch and sequence dimensions stay dynamic); its keys that the model
            takes become the exported inputs.
        output: the model output field the caller reads (``last_hidden_state``, ``logits``).
        choice: runtime and quantization (not torch).
        source: where the weights came from (path or hub id): with ``choice`` and ``output``,
            the cache key.
        cache_dir: the catalog option ``cache_dir`` (None: the default, see :mod:`engines.converted_cache`).
        threads: intra-op threads of the runtime.
        progress: the loading engine's :meth:`~engines.base.Engine.report_progress`: told
            ``"converting"`` while an export or a derived copy is made (not when cached).

    Raises:
        FailedPreconditionError: a package of the runtime is not installed (RUNTIME_NOT_INSTALLED).
        Exception: the export or the runtime failed (the load fails; nothing is cached).

    """
    choice.check_installed()
    root = converted_root(cache_dir)
    fingerprint = source_fingerprint(source)

    def folder_for(variant: RuntimeChoice) -> Path:
        key = f"{fingerprint}|{output}|{variant.label()}|{type(model).__name__}|{EXPORT_FORMAT}"
        digest = hashlib.sha256(key.encode()).hexdigest()[:16]
        return root / f"{Path(str(source)).name}-{output}-{variant.label()}-{digest}"

    def identity_of(variant: RuntimeChoice) -> str:
        # Not the export format: a new format supersedes the old one's copies.
        return f"{source_identity(source)}|{output}|{variant.label()}|{type(model).__name__}"

    def export(folder: Path) -> None:
        log.info("exporting encoder to ONNX (cached in %s)", folder)
        inputs = _export_onnx(model, sample, output, folder / "model.onnx")
        (folder / META_FILE).write_text(json.dumps({"inputs": inputs, "output": output}))

    # Every variant derives from the float32 ONNX export, made once (the slow step); quantizing or
    # converting it for OpenVINO takes a little more.
    onnx = folder_for(RuntimeChoice("onnx"))
    build_once(onnx, export, progress, identity_of(RuntimeChoice("onnx")))
    target = folder_for(choice)
    if target != onnx:

        def derive(folder: Path) -> None:
            log.info("deriving %s from %s", choice.label(), onnx)
            if choice.runtime == "openvino":
                _save_openvino(onnx / "model.onnx", folder / "model.xml", int8=choice.quantize == "int8")
            else:
                _quantize_onnx(onnx / "model.onnx", folder / "model.onnx")
            shutil.copy(onnx / META_FILE, folder / META_FILE)

        build_once(target, derive, progress, identity_of(choice))
    meta = json.loads((target / META_FILE).read_text())
    run = _onnx_runner(target, threads) if choice.runtime == "onnx" else _openvino_runner(target, threads)
    return ExportedModel(run, meta["inputs"], meta["output"], getattr(model, "config", None), target)


def _export_onnx(model: Any, sample: Mapping[str, Any], output: str, path: Path) -> list[str]:
    """Export ``model`` to ONNX at ``path`` (torch's dynamo exporter); returns the input names."""
    import inspect

    import torch

    accepted = inspect.signature(model.forward).parameters
    names = [name for name in sample if name in accepted]

    class Positional(torch.nn.Module):
        # torch.export takes positional tensors; the model takes keywords and returns a ModelOutput.
        def __init__(self) -> None:
            super().__init__()
            self.inner = model

        def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
            return self.inner(**dict(zip(names, tensors, strict=True)), return_dict=True)[output]

    batch, sequence = torch.export.Dim("batch"), torch.export.Dim("sequence")
    with torch.no_grad():
        torch.onnx.export(
            Positional().eval(),
            tuple(sample[name] for name in names),
            str(path),
            input_names=names,
            output_names=[output],
            dynamic_shapes=(tuple({0: batch, 1: sequence} for _ in names),),
            dynamo=True,
            verbose=False,
        )
    return names


def _quantize_onnx(source: Path, target: Path) -> None:
    """Write the int8 dynamic quantization of ``source`` to ``target`` (activations quantized per call).

    Per-channel weight scales: with one scale per tensor MiniLM's vectors drift to a cosine of
    about 0.94-0.97 from float32's; per channel keeps them above 0.98 (bench/README.md, quality).
    """
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(source, target, weight_type=QuantType.QInt8, per_channel=True)


def _save_openvino(source: Path, target: Path, *, int8: bool) -> None:
    """Convert the ONNX model ``source`` to OpenVINO IR at ``target`` (.xml, .bin); int8 weights on request.

    int8 is NNCF's weight compression (asymmetric, per channel): no calibration data needed.
    """
    import openvino as ov

    model = ov.convert_model(str(source))
    if int8:
        import nncf

        model = nncf.compress_weights(model, mode=nncf.CompressWeightsMode.INT8_ASYM)
    # Weights stay float32 (the default stores float16) so the unquantized copy matches torch.
    ov.save_model(model, str(target), compress_to_fp16=False)


def _onnx_runner(folder: Path, threads: int) -> Callable[[dict[str, np.ndarray]], np.ndarray]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(folder / "model.onnx"), options, providers=["CPUExecutionProvider"])

    def run(arrays: dict[str, np.ndarray]) -> np.ndarray:
        return session.run(None, arrays)[0]

    return run


def _openvino_runner(folder: Path, threads: int) -> Callable[[dict[str, np.ndarray]], np.ndarray]:
    import openvino as ov

    compiled = ov.Core().compile_model(
        str(folder / "model.xml"),
        "CPU",
        {
            "INFERENCE_NUM_THREADS": threads,
            "PERFORMANCE_HINT": "LATENCY",
            # CPUs with bf16 units would otherwise compute in bf16 and drift from torch's vectors.
            "INFERENCE_PRECISION_HINT": "f32",
        },
    )
    request = compiled.create_infer_request()

    def run(arrays: dict[str, np.ndarray]) -> np.ndarray:
        request.infer(arrays)
        return np.array(request.get_output_tensor(0).data, copy=True)

    return run
