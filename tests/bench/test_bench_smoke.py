"""Smoke test of the benchmark harness: every entry point in tiny mode, peers off, into a tmp dir.

Speed targets live in bench/ (``make bench``); this only keeps the harness from rotting.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import embeddings, results
from bench.__main__ import AREAS as AREAS_OF_RUN_ALL
from bench.stats import is_unstable, paired_ratio, percentile, summarize

REPO = Path(__file__).resolve().parents[2]
AREAS = (
    "generation",
    "embeddings",
    "memory",
    "overhead",
    "ocr",
    "speech",
    "anomaly",
    "isolation",
    "metrics_cost",
    "routing",
)


def test_percentile_matches_linear_interpolation():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([10], 95) == 10
    assert percentile([3, 1, 2], 0) == 1 and percentile([3, 1, 2], 100) == 3
    assert summarize([])["n"] == 0
    ratios = paired_ratio([2.0, 4.0, float("nan")], [1.0, 2.0, 1.0])
    assert ratios["median"] == 2.0 and ratios["n"] == 2


def test_update_readme_replaces_only_its_section(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("intro\n\n<!-- bench:a:begin -->\nold\n<!-- bench:a:end -->\n\ntail\n")
    results.update_readme(readme, "a", "new\n")
    results.update_readme(readme, "b", "other\n")
    results.update_readme(readme, "a", "newer\n")
    text = readme.read_text()
    assert "old" not in text and "new\n" not in text and text.count("newer") == 1
    assert text.startswith("intro") and "tail" in text and "other" in text


def _wait(proc: subprocess.Popen, timeout_s: float = 240) -> str:
    """The process's output; on timeout SIGTERM (the harness then stops the servers it started)."""
    try:
        return proc.communicate(timeout=timeout_s)[0]
    except subprocess.TimeoutExpired:
        proc.terminate()
        return proc.communicate(timeout=60)[0] + "\n(timed out)"


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory):
    """Run the entry points at once (each in its own process and out dir)."""
    out = tmp_path_factory.mktemp("bench")
    readme_before = (REPO / "bench" / "README.md").read_text()
    procs = {
        area: subprocess.Popen(
            [sys.executable, "-m", f"bench.{area}", "--tiny", "--no-peers", "--out", str(out / area)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for area in AREAS
    }
    logs = {area: _wait(proc) for area, proc in procs.items()}
    assert (REPO / "bench" / "README.md").read_text() == readme_before, "tiny runs must not touch bench/"
    return out, {area: (procs[area].returncode, logs[area]) for area in AREAS}


@pytest.mark.parametrize("area", AREAS)
def test_entry_point_writes_json_plot_and_table(tiny_runs, area):
    out, runs = tiny_runs
    check_area_output(out, area, *runs[area])


def test_documents_entry_point_alone(tmp_path):
    """bench.documents runs on its own: its OCR pages take both cores for a minute, which next to
    the other areas' tiny runs pushed the generation area past its time limit."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bench.documents",
            "--tiny",
            "--no-peers",
            "--out",
            str(tmp_path / "documents"),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    log = _wait(proc)
    check_area_output(tmp_path, "documents", proc.returncode, log)


@pytest.mark.parametrize("area", ["encoder_runtimes", "kv_pool_memory"])
def test_entry_point_alone_writes_json_plot_and_table(tmp_path, area):
    """The areas whose figures are quoted in README.md and docs/, each on its own (they load every variant)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", f"bench.{area}", "--tiny", "--out", str(tmp_path / area)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    log = _wait(proc, timeout_s=600)
    check_area_output(tmp_path, area, proc.returncode, log)
    payload = json.loads((tmp_path / area / f"{area}.json").read_text())
    if area == "encoder_runtimes":
        quality = payload["quality"]
        assert list(quality) == ["torch", "onnx", "onnx-int8", "openvino", "openvino-int8", "torch-int8"]
        assert quality["torch"]["cosine_min"] > 0.9999 and quality["torch"]["rerank_head_same"] == 30
        assert quality["torch"]["rerank_tau_min"] == 1.0 and quality["torch"]["zero_shot_labels_same"] == 60
        assert quality["torch"]["intent_labels_same"] == 60
        # torch's per-tensor dynamic int8 is far below the exported runtimes' (no catalog option offers it)
        assert all(q["cosine_min"] > 0.9 for name, q in quality.items() if name != "torch-int8")
        assert "| onnx-int8 |" in (tmp_path / area / "README.md").read_text()
    else:
        (scenario,) = payload["scenarios"]
        cells = {name: r["metrics"]["kv_cells"]["median"] for name, r in scenario["results"].items()}
        assert cells == {"llama-cpp-python": 4096, "streams": 8 * 2048, "kv-pool": 4096}


@pytest.mark.parametrize("area", sorted(AREAS_OF_RUN_ALL))
def test_every_area_refuses_a_dirty_tree_before_it_runs(monkeypatch, capsys, area):
    from bench import runner

    dirty = {"revision": "abc1234", "dirty": True, "dirty_paths": ["engines/x.py"]}
    monkeypatch.setattr(runner.environment, "git_state", lambda repo: dirty)
    monkeypatch.setattr(runner.signal, "signal", lambda *args: None)
    with pytest.raises(SystemExit) as refused:
        AREAS_OF_RUN_ALL[area].main(["--quick"])
    assert refused.value.code == 2 and "engines/x.py" in capsys.readouterr().err


def check_area_output(out: Path, area: str, returncode: int, log: str) -> None:
    """An area's tiny run exited 0 and wrote its JSON, README section and plot under ``out/area``."""
    assert returncode == 0, log[-3000:]
    payload = json.loads((out / area / f"{area}.json").read_text())
    assert payload["mode"] == "tiny" and payload["machine"]["logical_cores"] >= 1
    assert payload["packages"]["project"]["grpcio"]
    assert payload["scenarios"], log[-3000:]
    for scenario in payload["scenarios"]:
        ours = [n for n, r in scenario["results"].items() if payload["contenders"][n]["role"] == "ours"]
        assert ours and all(scenario["results"][n]["metrics"] for n in ours), scenario
        assert all(r["errors"] == 0 for r in scenario["results"].values()), scenario
    peers = [c for c in payload["contenders"].values() if c["role"] == "peer"]
    assert all(c["reason"] == "skipped (--no-peers)" for c in peers)
    readme = (out / area / "README.md").read_text()
    assert f"<!-- bench:{area}:begin -->" in readme and "| scenario | contender |" in readme
    pytest.importorskip("matplotlib")
    assert (out / area / f"{area}.png").stat().st_size > 1000


def test_run_all_help():
    proc = subprocess.run(
        [sys.executable, "-m", "bench.generation", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0 and "--tiny" in proc.stdout and "--no-peers" in proc.stdout


def test_anomaly_floor_is_measured_and_noted(tiny_runs):
    out, runs = tiny_runs
    assert runs["anomaly"][0] == 0, runs["anomaly"][1][-3000:]
    payload = json.loads((out / "anomaly" / "anomaly.json").read_text())
    floors = [n for n, c in payload["contenders"].items() if c["role"] == "floor"]
    assert floors and all(payload["contenders"][n]["reason"] is None for n in floors)
    for scenario in payload["scenarios"]:
        floor = next(n for n in scenario["results"] if n in floors)
        assert scenario["results"][floor]["metrics"]["latency_p50_ms"]["median"] > 0
    assert sum("ceiling is x" in note for note in payload["notes"]) == len(payload["scenarios"])


def test_floor_note_ceiling_is_the_median_of_paired_ratios():
    from bench.anomaly import floor_note

    reps = {
        "ref": {"per_rep": [{"latency_p50_ms": 10.0}, {"latency_p50_ms": 12.0}, None]},
        "echo": {"per_rep": [{"latency_p50_ms": 1.0}, {"latency_p50_ms": 3.0}, {"latency_p50_ms": 2.0}]},
    }
    note = floor_note("ECOD", {"results": reps}, "ref", "echo")
    # Pairs (10, 1) and (12, 3): ceilings 10/11 and 12/15, median 0.855; the unpaired rep is dropped.
    assert note is not None and "ceiling is x0.85" in note and "2.00 ms" in note
    assert floor_note("ECOD", {"results": {"ref": reps["ref"]}}, "ref", "echo") is None


#: The fields of a results payload that the markdown tests do not vary (bench.results' schema).
RESULTS_HEADER = {
    "title": "t",
    "finished": "now",
    "machine": {"cpu_model": "cpu", "usable_cores": 2, "ram_bytes": 2**34, "gpus": []},
    "mode": "quick",
    "reps": 3,
    "wall_s": 1.0,
    "json_name": "a.json",
    "png_name": "a.png",
    "git_revision": "abc1234",
    "git_dirty": False,
    "headline": [{"key": "tok_s", "label": "tok/s", "higher_is_better": True}],
}


def test_unstable_cells_are_marked_with_their_values():
    assert not is_unstable(summarize([100.0, 110.0, 120.0]))  # spread 0.18
    bimodal = summarize([38.8, 90.3, 39.5])
    assert is_unstable(bimodal) and bimodal["spread"] > 1
    assert not is_unstable(summarize([38.8]))  # one repetition cannot disagree with itself
    payload = {
        **RESULTS_HEADER,
        "contenders": {"peer": {"label": "the peer", "role": "peer"}},
        "scenarios": [
            {
                "name": "1 stream",
                "reference": "peer",
                "results": {
                    "peer": {
                        "metrics": {"tok_s": bimodal},
                        "per_rep": [{"tok_s": 38.8}, {"tok_s": 90.3}, {"tok_s": 39.5}],
                        "errors": 0,
                    }
                },
            }
        ],
    }
    text = results.markdown(payload)
    assert f"39.5 [38.9{results.DASH}85.2] {results.UNSTABLE_MARK}" in text
    assert "1 stream, the peer, tok/s: 38.8, 90.3, 39.5" in text
    assert "commit `abc1234`" in text and "uncommitted" not in text
    assert "not reproducible" in results.markdown({**payload, "git_dirty": True})
    busy = {**payload["machine"], "load_average_at_start": [15.1, 12.0, 9.0]}
    assert "under load (load average 15.1 at the start)" in results.markdown({**payload, "machine": busy})
    assert "under load" not in text


def test_a_run_of_deterministic_tables_only_has_no_timing_table_or_plot(tmp_path):
    """A payload without scenarios (``bench.gguf_quality --quality-only``): its tables, no empty main table."""
    payload = {
        **RESULTS_HEADER,
        "contenders": {},
        "scenarios": [],
        "tables": [{"title": "Quality", "header": ["type", "perplexity"], "rows": [["Q4_1", "9.1"]]}],
        "notes": ["the ceiling was not measured"],
    }
    text = results.markdown(payload)
    assert "| scenario |" not in text and "plot:" not in text and "commit `abc1234`" in text
    assert "| Q4_1 | 9.1 |" in text and "- the ceiling was not measured" in text
    assert results.plot(tmp_path / "a.png", payload) is None and not (tmp_path / "a.png").exists()


def test_git_state_ignores_the_bench_outputs(tmp_path):
    from bench.environment import git_state

    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "bench" / "results").mkdir(parents=True)
    (tmp_path / "code.py").write_text("x = 1\n")
    (tmp_path / "bench" / "results" / "a.json").write_text("{}\n")
    git("add", ".")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "init")
    clean = git_state(tmp_path)
    assert clean["revision"] and not clean["dirty"]
    (tmp_path / "bench" / "results" / "a.json").write_text('{"new": 1}\n')
    (tmp_path / "bench" / "README.md").write_text("tables\n")
    assert not git_state(tmp_path)["dirty"]
    (tmp_path / "code.py").write_text("x = 2\n")
    (tmp_path / "new.py").write_text("y = 1\n")
    dirty = git_state(tmp_path)
    assert dirty["dirty"] and sorted(dirty["dirty_paths"]) == ["code.py", "new.py"]


def test_results_from_a_dirty_tree_are_refused_unless_allowed(monkeypatch, tmp_path, capsys):
    from bench import runner

    dirty = {"revision": "abc1234", "dirty": True, "dirty_paths": ["engines/x.py"]}
    monkeypatch.setattr(runner.environment, "git_state", lambda repo: dirty)
    monkeypatch.setattr(runner.signal, "signal", lambda *args: None)
    with pytest.raises(SystemExit) as refused:
        runner.parse_config("overhead", ["--quick"])
    assert refused.value.code == 2 and "engines/x.py" in capsys.readouterr().err
    assert runner.parse_config("overhead", ["--quick", "--allow-dirty"]).git["dirty"]
    assert runner.parse_config("overhead", ["--quick", "--out", str(tmp_path)]).git["dirty"]


def test_cold_prompts_are_new_and_of_one_length():
    llama_cpp = pytest.importorskip("llama_cpp")
    from bench.workloads import chat_messages, gguf_path

    vocab = llama_cpp.Llama(model_path=str(gguf_path()), vocab_only=True, verbose=False)
    for index in range(8):
        systems = [chat_messages(index, f"run-{rep}")[0]["content"] for rep in range(20)]
        assert len(set(systems)) == len(systems)
        lengths = {len(vocab.tokenize(text.encode(), add_bos=False)) for text in systems}
        assert len(lengths) == 1, (index, lengths)
    assert chat_messages(3) == [chat_messages(3, "x")[1]]  # warm: the user prompt alone


def test_generation_reports_cold_and_warm_scenarios(tiny_runs):
    out, runs = tiny_runs
    assert runs["generation"][0] == 0, runs["generation"][1][-3000:]
    payload = json.loads((out / "generation" / "generation.json").read_text())
    names = [s["name"] for s in payload["scenarios"]]
    assert names == ["cold, 1 stream", "warm, 1 stream"]
    readme = (out / "generation" / "README.md").read_text()
    assert "TTFT p50 ms" in readme and "commit `" in readme


#: The generation bench's ceilings: name -> (label, the contender of ours it is the ceiling of).
GENERATION_CEILINGS = {
    "llama-batched": ("llama.cpp batched decode (no server)", "ours-grpc"),
    "transformers-batched": (
        "transformers generate, batch of B left-padded prompts (in-process)",
        "ours-transformers",
    ),
}


@pytest.mark.parametrize("name", sorted(GENERATION_CEILINGS))
def test_generation_measures_each_engines_ceiling_in_cold_scenarios(tiny_runs, name):
    label, ours = GENERATION_CEILINGS[name]
    out, runs = tiny_runs
    assert runs["generation"][0] == 0, runs["generation"][1][-3000:]
    payload = json.loads((out / "generation" / "generation.json").read_text())
    assert payload["contenders"][name] == {"label": label, "role": "ceiling", "reason": None}
    cold, warm = payload["scenarios"]
    ceiling = cold["results"][name]
    for metric in ("agg_tok_s", "stream_tok_s", "ttft_p50_ms"):
        assert ceiling["metrics"][metric]["median"] > 0, metric
    assert ceiling["metrics"]["tokens_mean"]["median"] == payload["settings"]["max_new_tokens"]
    assert "ceiling_ratio" not in ceiling  # a ceiling is measured against no other
    # Our rows of an engine are measured against that engine's own ceiling.
    assert cold["results"][ours]["ceiling"] == name and cold["results"][ours]["ceiling_ratio"]["median"] > 0
    assert name not in warm["results"]  # no prompt cache: cold only
    readme = (out / "generation" / "README.md").read_text()
    assert f"{results.TIMES} ceiling (aggregate tok/s)" in readme
    assert readme.count("| (ceiling) |") == len(GENERATION_CEILINGS)


def test_embeddings_measures_the_runtimes_in_process_and_in_our_server(tiny_runs):
    from engines.encoder_runtime import RuntimeChoice
    from engines.errors import FailedPreconditionError

    out, runs = tiny_runs
    assert runs["embeddings"][0] == 0, runs["embeddings"][1][-3000:]
    payload = json.loads((out / "embeddings" / "embeddings.json").read_text())
    contenders = payload["contenders"]

    def installed(runtime: str, quantize: str = "none") -> bool:
        try:
            RuntimeChoice(runtime, quantize).check_installed()
        except FailedPreconditionError:
            return False
        return True

    references = {"st-onnx": ("onnx", "none"), "st-openvino": ("openvino", "none")}
    references |= {"st-onnx-int8": ("onnx", "int8"), "st-openvino-int8": ("openvino", "int8")}
    servers = {
        f"ours-grpc-{runtime}" + ("" if quantize == "none" else f"-{quantize}"): (runtime, quantize)
        for runtime, quantize in embeddings.side_runtimes()
    }
    assert len(servers) == 3 and (embeddings.served_runtime(), "none") not in servers.values()
    assert ("onnx", "int8") in servers.values()
    gateways = [f"ours-gateway-{n}w" for n in embeddings.GATEWAY_WORKERS]
    assert all(contenders[name]["role"] == "ours" and contenders[name]["reason"] is None for name in gateways)
    for name, choice in (references | servers).items():
        assert contenders[name]["role"] == ("reference" if name in references else "ours")
        if installed(*choice):
            assert contenders[name]["reason"] is None, contenders[name]
    *others, largest = payload["scenarios"]
    for scenario in payload["scenarios"]:
        assert scenario["reference"] == "st-inprocess"
        measured = [n for n in references if contenders[n]["reason"] is None]
        assert all(scenario["results"][n]["metrics"]["sentences_s"]["median"] > 0 for n in measured)
    runtime_servers = [n for n in servers if contenders[n]["reason"] is None] + gateways
    assert all(largest["results"][n]["metrics"]["sentences_s"]["median"] > 0 for n in runtime_servers)
    # only where the goals are stated
    assert not any(n in s["results"] for s in others for n in [*servers, *gateways])
    best, torch = payload["anchors"]
    assert best["label"] == f"{results.TIMES} best in-process" and best["scenario"] == largest["name"]
    assert best["contender"] in ["st-inprocess", *references] and torch["contender"] == "st-inprocess"
    assert best["value"] == largest["results"][best["contender"]]["metrics"]["sentences_s"]["median"]
    for name in ["st-inprocess", *references]:
        if name in largest["results"]:
            assert largest["results"][name]["metrics"]["sentences_s"]["median"] <= best["value"]
    for result in largest["results"].values():
        assert result["anchor_ratios"][best["label"]]["median"] > 0
    readme = (out / "embeddings" / "README.md").read_text()
    assert f"| {results.TIMES} best in-process | {results.TIMES} torch 4/call |" in readme
    served = embeddings.served_runtime()
    assert f"| 4/call x 2 clients | ours gRPC Embed ({served}, as served) |" in readme
    assert "| 4/call x 2 clients | ours gRPC Embed (torch) |" in readme


def test_gguf_quality_compares_the_requantized_types(tmp_path):
    """The GGUF quality area in tiny mode: copies requantized into a tmp cache, quality and ceiling."""
    out = tmp_path / "out"
    cache = tmp_path / "cache"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.gguf_quality", "--tiny", "--out", str(out), "--cache-dir", str(cache)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    payload = json.loads((out / "gguf_quality.json").read_text())
    assert sorted(payload["quality"]) == ["f16", "q4_0", "q4_1", "q8_0"]
    assert payload["quality"]["q4_1"]["agreement"]["exact"] == len(payload["settings"]["prompts"])
    for quality in payload["quality"].values():
        assert quality["perplexity"] > 1 and len(quality["answers"]) == len(payload["settings"]["prompts"])
    assert sorted(p.stem.rsplit("-", 1)[1] for p in cache.glob("*/*.gguf")) == ["f16", "q4_0", "q8_0"]
    (scenario,) = payload["scenarios"]
    assert all(scenario["results"][name]["metrics"]["agg_tok_s"]["median"] > 0 for name in payload["quality"])
    readme = (out / "README.md").read_text()
    assert "<!-- bench:gguf_quality:begin -->" in readme and "| Q4_0 (requantized) |" in readme


def test_our_server_start_moves_to_fresh_ports_when_grpc_loses_its_port(tmp_path, monkeypatch):
    """grpc says "Failed to bind to address" (not the OS's text) when a picked port was taken meanwhile."""
    import socket

    from bench import procs, servers

    assert procs.bind_failed("RuntimeError: Failed to bind to address 127.0.0.1:37843; set GRPC_VERBOSITY")
    assert procs.bind_failed("[Errno 98] error while attempting to bind: address already in use")
    assert not procs.bind_failed("ModuleNotFoundError: No module named 'x'")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind((procs.LOOPBACK, 0))
        taken.listen()
        picks = iter([taken.getsockname()[1], procs.free_port()])
        monkeypatch.setattr(servers, "free_port", lambda: next(picks, None) or procs.free_port())
        server = servers.start_ours(tmp_path, name="ours-port-taken")
        try:
            assert server.grpc_target != f"{procs.LOOPBACK}:{taken.getsockname()[1]}"
            assert procs.grpc_serving(server.grpc_target)
        finally:
            server.stop()


def test_our_server_start_moves_its_metrics_port_too_when_it_was_taken(tmp_path, monkeypatch):
    """Python's OSError says "Address already in use" (capitalized) when the metrics port was taken."""
    import socket

    import httpx

    from bench import procs, servers

    assert procs.bind_failed("metrics port 127.0.0.1:45403 ([Errno 98] Address already in use)")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind((procs.LOOPBACK, 0))
        taken.listen()
        # The picks of the first attempt: gRPC, gateway, then the taken port for the metrics.
        picks = iter([procs.free_port(), procs.free_port(), taken.getsockname()[1]])
        monkeypatch.setattr(servers, "free_port", lambda: next(picks, None) or procs.free_port())
        server = servers.start_ours(tmp_path, name="ours-metrics-port-taken", metrics=True)
        try:
            assert server.metrics_port not in (None, taken.getsockname()[1])
            metrics = httpx.get(f"http://{procs.LOOPBACK}:{server.metrics_port}/metrics", timeout=10)
            assert "ur_" in metrics.text
        finally:
            server.stop()
