"""The peers' virtual environments: created and filled by the harness, under ``bench/`` (git-ignored).

Each peer gets its own venv so that its dependencies never touch the project's ``.venv``. An
install that fails makes the peer *unavailable* (with the reason); the harness goes on without it.
"""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
#: Install logs of the peers' venvs.
PEERS_DIR = BENCH_DIR / ".peers"
INSTALL_TIMEOUT_S = 20 * 60
#: infinity is pinned so that figures are reproducible; bump deliberately.
INFINITY_VERSION = "0.0.78"


class PeerUnavailableError(RuntimeError):
    """A peer cannot run here; the message says why (shown in the results)."""


@dataclass(frozen=True)
class PeerEnv:
    """A peer's venv: where it lives, what goes in it (pip steps, in order), how to check it.

    Attributes:
        name: Short name (``llama`` or ``infinity``).
        venv: The venv directory.
        steps: ``pip install`` argument lists, run in order (torch first where it matters).
        check: Python code that must run without error once installed.
        packages: Distribution names whose versions are recorded with the results.

    """

    name: str
    venv: Path
    steps: tuple[tuple[str, ...], ...]
    check: str
    packages: tuple[str, ...]

    @property
    def python(self) -> Path:
        """The venv's interpreter."""
        return self.venv / "bin" / "python"

    @property
    def stamp(self) -> Path:
        """File recording the steps of the last successful install."""
        return self.venv / ".bench-installed.json"


def llama_env() -> PeerEnv:
    """llama-cpp-python with its ``server`` extra, at the version of the project's venv.

    The same version means pip's wheel cache already holds the built wheel (no 5-minute build).
    """
    try:
        version = importlib.metadata.version("llama-cpp-python")
    except importlib.metadata.PackageNotFoundError:
        version = None
    spec = f"llama-cpp-python[server]=={version}" if version else "llama-cpp-python[server]"
    return PeerEnv(
        name="llama",
        venv=BENCH_DIR / ".venv-peers-llama",
        steps=((spec,),),
        check="import llama_cpp.server.app",
        packages=("llama-cpp-python", "fastapi", "uvicorn", "sse-starlette"),
    )


def infinity_env() -> PeerEnv:
    """infinity-emb with its ``server`` and ``torch`` extras; ``torch==2.13.0`` first (CPU build here)."""
    return PeerEnv(
        name="infinity",
        venv=BENCH_DIR / ".venv-peers-infinity",
        steps=(("torch==2.13.0",), (f"infinity-emb[server,torch]=={INFINITY_VERSION}",)),
        check="import infinity_emb, torch",
        packages=("infinity-emb", "torch", "transformers", "sentence-transformers", "fastapi", "uvicorn"),
    )


def ensure(env: PeerEnv, log=print) -> Path:
    """Create and fill ``env`` unless its last install had the same steps; return its interpreter.

    Raises:
        PeerUnavailableError: venv creation, an install step or the import check failed
            (the message quotes the end of the install log).

    """
    wanted = json.dumps([list(step) for step in env.steps])
    if env.python.exists() and env.stamp.exists() and env.stamp.read_text() == wanted:
        return env.python
    PEERS_DIR.mkdir(parents=True, exist_ok=True)
    log_path = PEERS_DIR / f"{env.name}-install.log"
    log(f"installing peer {env.name} into {env.venv} (log: {log_path}) ...")
    start = time.monotonic()
    with log_path.open("w") as log_file:
        commands = [[sys.executable, "-m", "venv", str(env.venv)]]
        commands += [[str(env.python), "-m", "pip", "install", "--quiet", *step] for step in env.steps]
        commands.append([str(env.python), "-c", env.check])
        for command in commands:
            log_file.write(f"$ {' '.join(command)}\n")
            log_file.flush()
            try:
                subprocess.run(
                    command, stdout=log_file, stderr=subprocess.STDOUT, timeout=INSTALL_TIMEOUT_S, check=True
                )
            except (OSError, subprocess.SubprocessError) as exc:
                tail = " | ".join(log_path.read_text(errors="replace").strip().splitlines()[-3:])
                raise PeerUnavailableError(f"install failed ({type(exc).__name__}): {tail[-400:]}") from None
    env.stamp.write_text(wanted)
    log(f"installed peer {env.name} in {time.monotonic() - start:.0f}s")
    return env.python
