"""OCR with Tesseract (the ``tesseract`` program, Debian ``tesseract-ocr``) through pytesseract.

The catalog ``source`` is a ``tessdata`` folder, or ``system`` for the installed program's own
data. Catalog options: :class:`~engines.ocr.options.TesseractOptions` (``psm``, ``oem``,
``default_language``, ``timeout_s``).
"""

from __future__ import annotations

import glob
import os
import shutil
from pathlib import Path

from PIL import Image

from engines.base import ModelSpec
from engines.errors import InvalidArgumentError, ModelLoadError
from engines.ocr.base import OcrEngine
from engines.ocr.options import TesseractOptions
from engines.ocr.types import Box, OcrLine, OcrWord
from engines.reasons import Reason
from engines.registry import register_backend
from engines.sources import resolve_source
from engines.types import MemoryUsage

# ISO 639-1 -> Tesseract traineddata names (ISO 639-2/T, plus Tesseract's script variants).
# Source: https://tesseract-ocr.github.io/tessdoc/Data-Files-in-different-versions.html
ISO_639_1 = {
    "ar": "ara", "bg": "bul", "bn": "ben", "ca": "cat", "cs": "ces", "da": "dan", "de": "deu",
    "el": "ell", "en": "eng", "es": "spa", "et": "est", "fa": "fas", "fi": "fin", "fr": "fra",
    "he": "heb", "hi": "hin", "hr": "hrv", "hu": "hun", "id": "ind", "it": "ita", "ja": "jpn",
    "ko": "kor", "lt": "lit", "lv": "lav", "nl": "nld", "no": "nor", "pl": "pol", "pt": "por",
    "ro": "ron", "ru": "rus", "sk": "slk", "sl": "slv", "sr": "srp", "sv": "swe", "ta": "tam",
    "th": "tha", "tr": "tur", "uk": "ukr", "vi": "vie", "zh": "chi_sim",
}  # fmt: skip


#: Peak RSS of the ``tesseract`` process for a 640 x 480 page, beside its language data (measured).
TESSERACT_PAGE_BYTES = 95 * 1024 * 1024
#: Where distributions install tessdata (Debian/Ubuntu per version, Fedora, Homebrew, source builds).
TESSDATA_FOLDERS = (
    "/usr/share/tesseract-ocr/*/tessdata",
    "/usr/share/tessdata",
    "/usr/local/share/tessdata",
    "/opt/homebrew/share/tessdata",
)


@register_backend
class TesseractEngine(OcrEngine[TesseractOptions]):
    """Tesseract 4/5 (LSTM) through ``pytesseract.image_to_data``."""

    backend = "tesseract"

    @classmethod
    def check_spec(cls, spec: ModelSpec) -> None:
        """The base checks (source ``system`` means the installed languages), and the program is installed.

        Raises:
            ModelLoadError: no ``tesseract`` program on the PATH (reason MODEL_SOURCE_MISSING), or
                see :meth:`Engine.check_spec`.
            InvalidArgumentError: see :meth:`Engine.check_spec`.

        """
        import pytesseract

        super().check_spec(spec)
        if shutil.which(pytesseract.pytesseract.tesseract_cmd) is None:
            raise ModelLoadError(
                "the tesseract program is not installed (apt-get install tesseract-ocr)",
                reason=Reason.MODEL_SOURCE_MISSING,
            )

    def _config(self) -> str:
        parts = [f"--psm {self.options.psm}", f"--oem {self.options.oem}"]
        if self.tessdata is not None:
            parts.append(f'--tessdata-dir "{self.tessdata}"')
        return " ".join(parts)

    def required_memory(self) -> MemoryUsage:
        """What one page's ``tesseract`` process holds: the default language's data plus its working memory.

        The server holds nothing between pages (a process per page), so this is the peak of a call:
        the ``default_language`` ``.traineddata`` (found in the source folder, ``TESSDATA_PREFIX`` or
        the usual system folders; 0 if not found) plus :data:`TESSERACT_PAGE_BYTES`, measured for a
        640 x 480 page (the child's peak RSS, ``python -m bench.memory_estimate``).
        """
        return MemoryUsage(ram_bytes=self._traineddata_bytes() + TESSERACT_PAGE_BYTES)

    def estimated_load_bytes(self) -> int:
        """:meth:`required_memory` (host RAM: the program runs on the CPU)."""
        return self.required_memory().ram_bytes

    def _traineddata_bytes(self) -> int:
        name = f"{self.options.default_language}.traineddata"
        if self.spec.source != "system":
            folder = resolve_source(self.spec.source).path
            candidates = [folder / name] if folder is not None else []
        else:
            prefix = os.environ.get("TESSDATA_PREFIX")
            candidates = [Path(prefix) / name] if prefix else []
            # Bounded: the handful of tessdata folders the distributions install.
            for pattern in TESSDATA_FOLDERS:
                candidates.extend(Path(p) / name for p in sorted(glob.glob(pattern)))
        return next((path.stat().st_size for path in candidates if path.is_file()), 0)

    def load(self) -> None:
        """Find the program and its installed languages.

        Raises:
            RuntimeError: tesseract is not installed (``apt-get install tesseract-ocr``).

        """
        import pytesseract

        self.tessdata = None if self.spec.source == "system" else resolve_source(self.spec.source).path
        try:
            self.version = str(pytesseract.get_tesseract_version())
        except pytesseract.TesseractNotFoundError as exc:
            raise RuntimeError(
                "the tesseract program is not installed (apt-get install tesseract-ocr)"
            ) from exc
        extra = f'--tessdata-dir "{self.tessdata}"' if self.tessdata is not None else ""
        self.installed = frozenset(pytesseract.get_languages(config=extra)) - {"osd"}

    def unload(self) -> None:
        """Stop the PDF worker (Tesseract itself runs as a process per page)."""
        self.pdf_worker.stop()

    def resolve_languages(self, languages: tuple[str, ...]) -> tuple[str, ...]:
        """ISO 639-1 (or Tesseract's own names) to installed traineddata names.

        Raises:
            InvalidArgumentError: a language whose data is not installed (UNSUPPORTED_LANGUAGE).

        """
        if not languages:
            return (self.options.default_language,)
        resolved = []
        for code in languages:
            name = ISO_639_1.get(code.lower(), code)
            if name not in self.installed:
                raise InvalidArgumentError(
                    f"tesseract has no data for language {code!r} ({name}); installed: "
                    f"{', '.join(sorted(self.installed))} (e.g. apt-get install tesseract-ocr-{name})",
                    reason=Reason.UNSUPPORTED_LANGUAGE,
                    field="options.languages",
                    language=code,
                )
            resolved.append(name)
        return tuple(resolved)

    def recognize(
        self, image: Image.Image, languages: tuple[str, ...], *, words: bool = True
    ) -> list[OcrLine]:
        """Words with boxes and confidences grouped into Tesseract's own lines, in its reading order.

        Tesseract reports words in any case, so ``words`` changes nothing here.
        """
        import pytesseract

        data = pytesseract.image_to_data(
            image,
            lang="+".join(languages),
            config=self._config(),
            output_type=pytesseract.Output.DICT,
            timeout=self.options.timeout_s,
        )
        grouped: dict[tuple[int, int, int], list[OcrWord]] = {}
        for i, text in enumerate(data["text"]):
            confidence = float(data["conf"][i])
            if data["level"][i] != 5 or confidence < 0 or not text.strip():
                continue
            key = (data["block_num"][i], data["par_num"][i], data["line_num"][i])
            box = Box(data["left"][i], data["top"][i], data["width"][i], data["height"][i])
            grouped.setdefault(key, []).append(OcrWord(text.strip(), box, confidence / 100.0))
        lines = []
        for words in grouped.values():  # dicts keep Tesseract's reading order
            confidence = sum(w.confidence for w in words) / len(words)
            text = " ".join(w.text for w in words)
            lines.append(
                OcrLine(text=text, box=Box.union([w.box for w in words]), confidence=confidence, words=words)
            )
        return lines
