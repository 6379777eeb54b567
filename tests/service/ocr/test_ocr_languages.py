"""Tesseract in a second language: German (Debian tesseract-ocr-deu, installed by `make system-deps`)."""

from __future__ import annotations

import grpc
import pytest

from tests.conftest import error_info
from tests.service.ocr.helpers import cer, ocr, render_lines

GERMAN = render_lines(
    [
        "Größere Bäume wachsen über die Straße",
        "Fünf schöne Häuser am Flussufer",
        "Grüße aus München und Köln",
    ],
    "DejaVuSans",
    32,
)


@pytest.mark.parametrize("language", ["de", "deu"])
async def test_german_umlauts_and_eszett(inference, language):
    [response] = await ocr(inference, GERMAN.png(), model="tesseract", languages=[language])
    assert response.engine == "tesseract"
    error = cer(GERMAN.text, response.text)
    assert error <= 0.05, f"CER {error:.3f}: expected {GERMAN.text!r}, got {response.text!r}"
    for word in ("Größere", "Bäume", "über", "Straße", "Fünf", "Grüße", "München", "Köln"):
        assert word in response.text, f"{word!r} not read: {response.text!r}"


async def test_english_data_misses_the_umlauts(inference):
    """The default (English) data on the same page: the language choice is what reads them."""
    [response] = await ocr(inference, GERMAN.png(), model="tesseract")
    assert cer(GERMAN.text, response.text) > 0.1, response.text
    assert "ß" not in response.text and "Größere" not in response.text


async def test_german_and_english_together(inference):
    page = render_lines(["Invoice Rechnung über 250 Euro", "Thank you für Ihre Bestellung"])
    # Tesseract tries its languages in order: German first keeps the umlauts of the mixed text.
    [response] = await ocr(inference, page.png(), model="tesseract", languages=["de", "en"])
    assert cer(page.text, response.text) <= 0.05, response.text
    for word in ("Invoice", "über", "Thank", "für", "Bestellung"):
        assert word in response.text, f"{word!r} not read: {response.text!r}"


@pytest.mark.parametrize("language", ["zz", "klingon"])
async def test_language_without_data_is_invalid_argument(inference, language):
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await ocr(inference, GERMAN.png(), model="tesseract", languages=["de", language])
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, caught.value.details()
    info = error_info(caught.value)
    assert info.reason == "UNSUPPORTED_LANGUAGE"
    assert info.metadata["language"] == language
    # The message names what is installed, German included.
    assert "deu" in caught.value.details() and language in caught.value.details()
