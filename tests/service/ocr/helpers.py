"""Rendered test pages, OCR calls and the character error rate used by the OCR tests."""

from __future__ import annotations

import io
import re
import struct
import zlib
from dataclasses import dataclass

from PIL import Image, ImageDraw, ImageFont
from universal_runtime.v1 import ocr_pb2 as pb

FONT_DIR = "/usr/share/fonts/truetype/dejavu"


def font(name: str, size: int) -> ImageFont.FreeTypeFont:
    """A DejaVu font (Debian fonts-dejavu-core, installed by `make install`)."""
    return ImageFont.truetype(f"{FONT_DIR}/{name}.ttf", size)


@dataclass
class Rendered:
    """A page image and where each text line was drawn (left, top, right, bottom, in pixels)."""

    image: Image.Image
    lines: list[tuple[str, tuple[float, float, float, float]]]

    @property
    def text(self) -> str:
        return "\n".join(text for text, _ in self.lines)

    def png(self) -> bytes:
        out = io.BytesIO()
        self.image.save(out, "PNG")
        return out.getvalue()


def render_lines(
    lines: list[str], face: str = "DejaVuSans", size: int = 32, width: int = 1200, x: int = 40
) -> Rendered:
    """Lines of text, one under the other, black on white."""
    f = font(face, size)
    height = 60 + int(len(lines) * size * 1.8)
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    placed = []
    for i, text in enumerate(lines):
        position = (x, 30 + int(i * size * 1.8))
        draw.text(position, text, font=f, fill="black")
        placed.append((text, draw.textbbox(position, text, font=f)))
    return Rendered(image, placed)


def render_two_columns(title: str, left: list[str], right: list[str], size: int = 30) -> Rendered:
    """A title across the page over two columns separated by a wide gutter."""
    f = font("DejaVuSerif", size)
    image = Image.new("RGB", (1400, 120 + int(len(left) * size * 1.7)), "white")
    draw = ImageDraw.Draw(image)
    placed = [(title, draw.textbbox((40, 20), title, font=f))]
    draw.text((40, 20), title, font=f, fill="black")
    for column_x, column in ((40, left), (760, right)):
        for i, text in enumerate(column):
            position = (column_x, 100 + int(i * size * 1.7))
            draw.text(position, text, font=f, fill="black")
            placed.append((text, draw.textbbox(position, text, font=f)))
    return Rendered(image, placed)


def render_rotated(text: str, angle: float, size: int = 40) -> Rendered:
    """One line rotated by ``angle`` degrees (counter-clockwise) pasted on a white page."""
    f = font("DejaVuSans", size)
    probe = ImageDraw.Draw(Image.new("L", (1, 1)))
    _, _, right, bottom = probe.textbbox((0, 0), text, font=f)
    layer = Image.new("L", (right + 20, bottom + 20), 0)
    ImageDraw.Draw(layer).text((10, 10), text, font=f, fill=255)
    rotated = layer.rotate(angle, expand=True, resample=Image.BICUBIC)
    page = Image.new("RGB", (rotated.width + 120, rotated.height + 120), "white")
    offset = (60, 60)
    page.paste(Image.new("RGB", rotated.size, "black"), offset, rotated)
    x0, y0, x1, y1 = rotated.getbbox()
    return Rendered(page, [(text, (x0 + offset[0], y0 + offset[1], x1 + offset[0], y1 + offset[1]))])


def pdf_of(images: list[Image.Image], resolution: float = 100.0) -> bytes:
    """A PDF with one page per image (pages hold images only: no text layer)."""
    out = io.BytesIO()
    images[0].save(out, "PDF", save_all=True, append_images=images[1:], resolution=resolution)
    return out.getvalue()


def pdf_with_text_layer(lines: list[str]) -> bytes:
    """A one-page PDF whose text is real text (Helvetica), so it has a text layer.

    Built by hand after PDF 1.7 §7.5 (header, objects, xref table with 20-byte entries, trailer).
    """
    content = "BT /F1 24 Tf 72 700 Td 30 TL " + " ".join(f"({t}) Tj T*" for t in lines) + " ET"
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content.encode()),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def png_with_padding(png: bytes, padding_bytes: int) -> bytes:
    """A valid PNG grown by a private ancillary chunk (``prVt``) that decoders skip (PNG §5.4)."""
    payload = bytes(padding_bytes)
    chunk = struct.pack(">I", len(payload)) + b"prVt" + payload
    chunk += struct.pack(">I", zlib.crc32(b"prVt" + payload) & 0xFFFFFFFF)
    iend = png.rindex(b"IEND") - 4
    return png[:iend] + chunk + png[iend:]


def requests(data: bytes, chunk_bytes: int = 1 << 20, **options) -> list[pb.OcrRequest]:
    """OcrRequests: options on the first, the file in chunks of ``chunk_bytes``."""
    chunks = [data[i : i + chunk_bytes] for i in range(0, len(data), chunk_bytes)] or [b""]
    out = [pb.OcrRequest(options=pb.OcrOptions(**options), chunk=chunks[0])]
    out.extend(pb.OcrRequest(chunk=c) for c in chunks[1:])
    return out


async def ocr(stub, data: bytes, chunk_bytes: int = 1 << 20, **options) -> list[pb.OcrResponse]:
    """Run Ocr and collect every page response."""

    async def messages():
        for message in requests(data, chunk_bytes, **options):
            yield message

    return [response async for response in stub.Ocr(messages())]


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance (insertions, deletions, substitutions), O(len(a) * len(b))."""
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, start=1):
        current = [i]
        for j, cb in enumerate(b, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def cer(expected: str, recognized: str) -> float:
    """Character error rate: edit distance / len(expected), on the text without whitespace.

    Whitespace is left out because PP-OCRv4's recognizer (trained mostly on Chinese) often drops
    the space between Latin words; order and every other character still count.
    """
    strip = lambda s: re.sub(r"\s+", "", s)  # noqa: E731
    return edit_distance(strip(expected), strip(recognized)) / max(1, len(strip(expected)))


def contains(outer: pb.BoundingBox, point: tuple[float, float], slack: float = 4.0) -> bool:
    """Whether ``point`` lies in ``outer`` (grown by ``slack`` pixels)."""
    x, y = point
    return (
        outer.x - slack <= x <= outer.x + outer.width + slack
        and outer.y - slack <= y <= outer.y + outer.height + slack
    )
