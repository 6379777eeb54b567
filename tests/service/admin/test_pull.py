"""``pull``: offline and network failures for real; the rest against a local stand-in hub, then a
server started on the written catalog serves the pulled model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
import yaml
from universal_runtime.v1 import encoders_pb2, inference_service_pb2_grpc

from engines.sources import resolve_source
from service.admin import pull
from service.catalog import load_catalog
from tests.conftest import MINILM_SOURCE, REPO_ROOT, child_server_env, free_port
from tests.service.admin.conftest import cli, started
from tests.service.admin.local_hub import REVISION, LocalHub

HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"
MINILM_DIR = resolve_source(MINILM_SOURCE).path


def pull_in_child(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    catalog = tmp_path / "catalog.yaml"
    return subprocess.run(
        [sys.executable, "-m", "service.cli", "pull", HUB_ID, "--catalog", str(catalog)],
        cwd=REPO_ROOT, env=child_server_env(UR_DATA_DIR=str(tmp_path / "data"), **env),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_offline_mode_fails_with_one_line(tmp_path):
    result = pull_in_child(tmp_path, HF_HUB_OFFLINE="1")
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr == (
        f"universal-runtime pull: cannot download {HUB_ID}: the Hugging Face hub is off "
        "(HF_HUB_OFFLINE is set); unset it, or add a local copy to the catalog by hand\n"
    )
    assert not (tmp_path / "catalog.yaml").exists()


def test_a_network_error_fails_with_one_line(tmp_path):
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens: the connection is refused
    result = pull_in_child(tmp_path, HF_HUB_OFFLINE="0", HF_ENDPOINT=endpoint)
    assert result.returncode == 1 and result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"universal-runtime pull: cannot reach the Hugging Face hub at {endpoint}: ")
    assert "refused" in line.lower()
    assert not (tmp_path / "catalog.yaml").exists()


@pytest.fixture
def minilm_hub(monkeypatch) -> LocalHub:
    hub = LocalHub(MINILM_DIR)
    monkeypatch.setattr(pull, "make_hub", lambda: hub)
    return hub


async def test_pull_writes_a_verified_entry_that_a_server_serves(tmp_path, minilm_hub):
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(
        "# my models\nmodels:\n    # kept as written\n    other:\n        tasks: [ocr]\n"
        "        backend: tesseract\n        source: system\n"
    )
    result = await cli("pull", HUB_ID, "--catalog", str(catalog), "--dest", str(tmp_path / "minilm"))
    assert result.code == 0, result.err
    assert result.err.splitlines() == [
        "all-minilm-l6-v2: Installing: downloading",
        "all-minilm-l6-v2: Installing: verifying",
    ]
    assert result.out.startswith("pulled all-minilm-l6-v2: sentence_transformers (embed), ")
    assert f"verified; added to {catalog}" in result.out

    # Configs first (to choose the backend), then the weights; other formats and .gitattributes stay.
    configs, files = minilm_hub.downloads
    assert "modules.json" in configs and "model.safetensors" not in configs
    assert "model.safetensors" in files and "1_Pooling/config.json" in files
    assert ".gitattributes" not in files

    text = catalog.read_text()
    assert text.startswith("# my models\nmodels:\n    # kept as written\n    other:\n")
    assert f"    # pulled from {HUB_ID} at {REVISION[:12]} on " in text
    entry = yaml.safe_load(text)["models"]["all-minilm-l6-v2"]
    assert entry == {
        "tasks": ["embed"],
        "backend": "sentence_transformers",
        "source": str((tmp_path / "minilm").resolve()),
    }
    assert set(load_catalog(catalog).specs) == {"other", "all-minilm-l6-v2"}

    running = await started(tmp_path, catalog_path=catalog)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
            stub = inference_service_pb2_grpc.InferenceServiceStub(channel)
            answer = await stub.Embed(
                encoders_pb2.EmbedRequest(model="all-minilm-l6-v2", inputs=["pulled and served"])
            )
        assert answer.dimensions == 384 and answer.model == "all-minilm-l6-v2"
        listed = json.loads((await cli("ls", "--json", "--address", f"127.0.0.1:{running.port}")).out)
        assert {m["name"]: m["status"] for m in listed}["all-minilm-l6-v2"] == "ready"
    finally:
        await running.stop(grace=0.5)

    again = await cli("pull", HUB_ID, "--catalog", str(catalog), "--dest", str(tmp_path / "minilm"))
    assert again.code == 1
    assert again.err.splitlines()[-1] == (
        f"universal-runtime pull: all-minilm-l6-v2 is already in {catalog}: "
        "pass --name to choose another, or --force"
    )


async def test_pull_into_the_user_catalog_that_the_server_merges(tmp_path, minilm_hub, monkeypatch):
    """No --catalog and no UR_CATALOG_PATH: <UR_DATA_DIR>/catalog.yaml, merged over the default."""
    monkeypatch.delenv("UR_CATALOG_PATH", raising=False)
    monkeypatch.setenv("UR_DATA_DIR", str(tmp_path / "data"))
    result = await cli("pull", HUB_ID, "--name", "my-minilm", "--keep-alive", "1m", "--json")
    assert result.code == 0, result.err
    answer = json.loads(result.out)
    user_catalog = tmp_path / "data" / "catalog.yaml"
    assert answer["catalog"] == str(user_catalog) and answer["revision"] == REVISION
    assert answer["source"] == str(tmp_path / "data" / "models" / "my-minilm")
    assert answer["keep_alive"] == "1m" and answer["bytes"] > 90_000_000

    merged = load_catalog(None, user_path=user_catalog).specs
    assert "my-minilm" in merged and "smollm2-135m-instruct" in merged  # the default's stay
    assert load_catalog(user_catalog).specs.keys() == {"my-minilm"}


async def test_a_file_that_does_not_match_the_hub_is_refused(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "modules.json").write_text("[]")
    (repo / "config.json").write_text('{"architectures": ["BertModel"]}')
    (repo / "model.safetensors").write_bytes(b"\0" * 200_000)
    hub = LocalHub(
        repo, tamper=lambda p: p.write_bytes(b"\1" * 200_000) if p.suffix == ".safetensors" else None
    )
    monkeypatch.setattr(pull, "make_hub", lambda: hub)
    catalog = tmp_path / "catalog.yaml"
    result = await cli("pull", "org/tampered", "--catalog", str(catalog), "--dest", str(tmp_path / "out"))
    assert result.code == 1
    assert result.err.splitlines()[-1] == (
        "universal-runtime pull: verification failed: model.safetensors does not match the hub's SHA-256 "
        "(deleted; pull again)"
    )
    assert not catalog.exists() and not (tmp_path / "out" / "model.safetensors").exists()


async def test_a_gguf_repo_needs_a_file_choice_and_becomes_a_llama_cpp_entry(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    repo.mkdir()
    for name in ("tiny.Q4_0.gguf", "tiny.Q8_0.gguf"):
        (repo / name).write_bytes(b"GGUF" + name.encode())
    (repo / "README.md").write_text("a model card")
    monkeypatch.setattr(pull, "make_hub", lambda: LocalHub(repo))
    catalog = tmp_path / "catalog.yaml"
    ambiguous = await cli("pull", "org/tiny-GGUF", "--catalog", str(catalog), "--dest", str(tmp_path / "out"))
    assert ambiguous.code == 1
    assert ambiguous.err.splitlines()[-1] == (
        "universal-runtime pull: the repo has 2 GGUF files; choose one with --file: tiny.Q4_0.gguf, tiny.Q8_0.gguf"
    )
    chosen = await cli(
        "pull", "org/tiny-GGUF", "--file", "tiny.Q8_0.gguf", "--catalog", str(catalog),
        "--dest", str(tmp_path / "out"),
    )  # fmt: skip
    assert chosen.code == 0, chosen.err
    entry = yaml.safe_load(catalog.read_text())["models"]["tiny.q8_0"]
    assert entry == {
        "tasks": ["generate"],
        "backend": "llama_cpp",
        "source": str((tmp_path / "out" / "tiny.Q8_0.gguf").resolve()),
    }
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["tiny.Q8_0.gguf"]


async def test_a_repo_nothing_serves_is_refused_before_downloading_weights(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "config.json").write_text('{"architectures": ["WhisperForConditionalGeneration"]}')
    (repo / "model.safetensors").write_bytes(b"\0" * 1000)
    hub = LocalHub(repo)
    monkeypatch.setattr(pull, "make_hub", lambda: hub)
    result = await cli(
        "pull", "org/whisper", "--catalog", str(tmp_path / "c.yaml"), "--dest", str(tmp_path / "o")
    )
    assert result.code == 1
    assert result.err.splitlines()[-1] == (
        "universal-runtime pull: cannot tell which backend serves this repo "
        "(WhisperForConditionalGeneration); pass --backend and --task"
    )
    assert hub.downloads == [["config.json"]]


def test_the_user_catalog_overrides_the_default_only_when_no_catalog_is_set(tmp_path):
    user = tmp_path / "catalog.yaml"
    user.write_text(
        "models:\n  all-minilm-l6-v2: {tasks: [embed], backend: sentence_transformers, source: /x}\n"
        "  broken: {tasks: [fly], backend: x, source: y}\n"
    )
    merged = load_catalog(None, user_path=user)
    assert merged.specs["all-minilm-l6-v2"].source == "/x" and "tesseract" in merged.specs
    assert "broken" in merged.invalid
    explicit = tmp_path / "explicit.yaml"
    explicit.write_text("models: {}\n")
    assert load_catalog(explicit, user_path=user).specs == {}
    assert "all-minilm-l6-v2" not in load_catalog(None, user_path=tmp_path / "absent.yaml").invalid
