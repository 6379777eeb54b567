"""Where engines report a load's progress: building a converted copy says
``converting`` (then the model's status reads ``Installing: converting``), finding it cached says
nothing. The end-to-end stream is in tests/service/model_manager/test_model_progress.py."""

from __future__ import annotations

from pathlib import Path

from engines.converted_cache import CONVERTING, build_once
from engines.generation.options import LlamaCppOptions
from engines.generation.requantize import model_file, requantized


def test_building_a_copy_reports_converting_and_a_cached_one_nothing(tmp_path):
    heard: list[str] = []
    built: list[Path] = []

    def build(folder: Path) -> None:
        assert heard == [CONVERTING]  # said before the work starts
        (folder / "copy.bin").write_bytes(b"x")
        built.append(folder)

    assert build_once(tmp_path / "copy", build, heard.append) is True
    assert heard == ["converting"] and len(built) == 1
    assert build_once(tmp_path / "copy", build, heard.append) is False
    assert heard == ["converting"] and len(built) == 1
    assert build_once(tmp_path / "other", lambda folder: None) is True  # no listener: nothing to tell


def test_a_requantized_gguf_reports_converting_once(tmp_path):
    source = tmp_path / "model.gguf"
    source.write_bytes(b"GGUF")
    heard: list[str] = []

    def quantizer(src: Path, target: Path, ftype: int) -> None:
        target.write_bytes(src.read_bytes())

    options = LlamaCppOptions(quantize="q4_0", cache_dir=tmp_path / "cache")
    first = requantized(source, "q4_0", tmp_path / "cache", quantizer, progress=heard.append)
    assert heard == ["converting"] and first.is_file()
    # model_file passes the listener on; the copy is cached now, so there is nothing to report.
    assert model_file(source, options, heard.append) == first
    assert heard == ["converting"]
