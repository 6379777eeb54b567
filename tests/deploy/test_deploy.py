"""deploy/k8s: the Kubernetes manifests render and validate.

The manifests are rendered with `kubectl kustomize` and every document validated offline against
the Kubernetes schemas (kubernetes-validate, strict: unknown fields fail). The state store's
wiring and the two replicas that share it are in tests/deploy/test_deploy_shared_state.py.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.deploy.dockerfile import dockerfile_env, dockerfile_stages

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
# A version kubernetes-validate bundles schemas for; the manifests use nothing newer.
KUBE_VERSION = "1.30"
INFERENCE_SERVICE = "universal_runtime.v1.InferenceService"
PORTS = {50051, 8000, 9090}
# The in-process gateway's streams get this much longer than UR_SHUTDOWN_GRACE_S (service/cli.py).
GATEWAY_EXTRA_GRACE_S = 2


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


#: What a user's overlay over the external-state-store component sets: its bucket and credentials.
EXTERNAL_STATE_URL = "s3://my-bucket/universal-runtime"
EXTERNAL_KEY_ID = "AKIAEXAMPLEEXTERNAL"


def overlay(directory: Path, components: list[str], **fields) -> list[dict]:
    """Render a user's overlay in ``directory``: the base, ``components`` of deploy/k8s/components
    and further kustomization ``fields``."""
    # kustomize takes relative paths only.
    relative = os.path.relpath(K8S, directory)
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [f"{relative}/base"],
        "components": [f"{relative}/components/{name}" for name in components],
        **fields,
    }
    (directory / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return kustomize(directory)


@pytest.fixture(scope="module")
def external_store(tmp_path_factory) -> list[dict]:
    """The base with components/external-state-store, as the user's overlay its comment shows."""
    directory = tmp_path_factory.mktemp("overlay")
    (directory / "my-s3.env").write_text(
        f"AWS_ACCESS_KEY_ID={EXTERNAL_KEY_ID}\nAWS_SECRET_ACCESS_KEY=not-a-secret\n"
    )
    state_url = {"name": "UR_STATE_URL", "value": EXTERNAL_STATE_URL}
    patch = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "universal-runtime"},
        "spec": {"template": {"spec": {"containers": [{"name": "universal-runtime", "env": [state_url]}]}}},
    }
    return overlay(
        directory,
        ["external-state-store"],
        patches=[{"patch": yaml.safe_dump(patch)}],
        secretGenerator=[{"name": "universal-runtime-state", "behavior": "replace", "envs": ["my-s3.env"]}],
    )


@pytest.fixture(scope="module")
def pod_monitor(tmp_path_factory) -> list[dict]:
    """The base with components/pod-monitor (for the Prometheus Operator)."""
    return overlay(tmp_path_factory.mktemp("overlay"), ["pod-monitor"])


def one(docs: list[dict], kind: str, name: str | None = None) -> dict:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"{len(found)} {kind} {name or ''}"
    return found[0]


def container(docs: list[dict]) -> dict:
    (main,) = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    return main


def env_of(docs: list[dict]) -> dict[str, str]:
    """The runtime container's environment with literal values (those from a Secret left out)."""
    entries = container(docs)["env"]
    names = [entry["name"] for entry in entries]
    assert len(names) == len(set(names)), f"repeated env: {names}"
    return {entry["name"]: entry["value"] for entry in entries if "value" in entry}


#: The runtime's environment that points it at the state store (deploy/k8s/base/state-store.yaml).
STATE_ENV = ("UR_STATE_URL", "UR_STATE_STORAGE_OPTIONS", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


def secret_value(docs: list[dict], ref: dict) -> str:
    """The value a ``secretKeyRef`` names in the rendered Secrets (fails when the key is missing)."""
    data = one(docs, "Secret", ref["name"])["data"]
    assert ref["key"] in data, f"Secret {ref['name']} has no key {ref['key']}"
    return base64.b64decode(data[ref["key"]]).decode()


def state_settings(docs: list[dict]) -> dict[str, str]:
    """The runtime's state settings as its pods get them: literal values, and the Secret's for refs."""
    settings = {}
    for entry in container(docs)["env"]:
        if entry["name"] in STATE_ENV:
            ref = entry.get("valueFrom", {}).get("secretKeyRef")
            settings[entry["name"]] = secret_value(docs, ref) if ref else entry["value"]
    assert settings.keys() == set(STATE_ENV)
    return settings


def pod_labels(docs: list[dict], kind: str) -> dict[str, str]:
    """The pod template labels of the one workload of ``kind`` (Deployment, StatefulSet)."""
    return one(docs, kind)["spec"]["template"]["metadata"]["labels"]


@pytest.mark.parametrize("rendering", ["base", "gpu", "external_store", "pod_monitor"])
def test_rendered_documents_validate_against_the_kubernetes_schemas(rendering, request, kubernetes_validate):
    docs = request.getfixturevalue(rendering)
    assert docs
    for doc in docs:
        if doc["kind"] == "PodMonitor":  # a CRD's object: test_the_pod_monitor_... checks it
            continue
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
    assert kinds == {
        "Deployment",
        "Service",
        "PodDisruptionBudget",
        "HorizontalPodAutoscaler",
        "StatefulSet",
        "NetworkPolicy",
    }


def test_strict_validation_rejects_an_unknown_field(kubernetes_validate):
    """The validator is strict: a misspelt field would not pass silently."""
    deployment = yaml.safe_load((K8S / "base" / "deployment.yaml").read_text())
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessprobe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBE_VERSION, strict=True)


def test_base_objects(base):
    assert sorted(d["kind"] for d in base) == sorted(
        [
            "ConfigMap",
            "Deployment",
            "HorizontalPodAutoscaler",
            "PodDisruptionBudget",
            "Service",
            "Service",
            # The shared state store (tests/deploy/test_deploy_shared_state.py).
            "StatefulSet",
            "Service",
            "Secret",
            "NetworkPolicy",
        ]
    )
    deployment = one(base, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    workloads = {kind: pod_labels(base, kind) for kind in ("Deployment", "StatefulSet")}
    for kind, labels in workloads.items():
        assert one(base, kind)["spec"]["selector"]["matchLabels"].items() <= labels.items()
    # Every Service and the PDB select the pods of exactly one workload: the store's Service never
    # sends traffic to the runtime, nor the runtime's Services to the store.
    for doc in base:
        if doc["kind"] in ("Service", "PodDisruptionBudget"):
            selector = doc["spec"]["selector"]
            selector = selector.get("matchLabels", selector)
            selected = [kind for kind, labels in workloads.items() if selector.items() <= labels.items()]
            assert len(selected) == 1, f"{doc['kind']} {doc['metadata']['name']} selects {selected}"
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


def test_services_headless_grpc_and_http(base):
    grpc_service = one(base, "Service", "universal-runtime-grpc")
    assert grpc_service["spec"]["clusterIP"] == "None"
    assert [p["port"] for p in grpc_service["spec"]["ports"]] == [50051]
    http = one(base, "Service", "universal-runtime")
    assert http["spec"].get("type", "ClusterIP") == "ClusterIP"
    assert {p["port"] for p in http["spec"]["ports"]} == {8000, 9090}


def test_prometheus_scrapes_each_pod_on_its_metrics_port(base):
    """The pods carry the scrape annotations (the kubernetes-pods job then labels the series with
    namespace and pod, which the adapter's rule needs); the Service does not, or each pod would be
    scraped twice."""
    annotations = one(base, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    metrics_port = next(p["containerPort"] for p in container(base)["ports"] if p["name"] == "metrics")
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(metrics_port)
    assert annotations["prometheus.io/path"] == "/metrics"
    for service in (d for d in base if d["kind"] == "Service"):
        assert not any(key.startswith("prometheus.io/") for key in service["metadata"].get("annotations", {}))


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


ADAPTER_VALUES = K8S / "prometheus-adapter" / "values.yaml"


@pytest.mark.parametrize("rendering", ["base", "gpu"])
def test_the_autoscaler_scales_on_the_queue_gauge_with_cpu_as_a_floor(rendering, request):
    metrics = one(request.getfixturevalue(rendering), "HorizontalPodAutoscaler")["spec"]["metrics"]
    (queue,) = [m["pods"] for m in metrics if m["type"] == "Pods"]
    assert queue["metric"] == {"name": "ur_requests_waiting"}
    assert queue["target"]["type"] == "AverageValue"
    assert 1 <= float(queue["target"]["averageValue"]) <= 16
    (cpu,) = [m["resource"] for m in metrics if m["type"] == "Resource"]
    assert cpu["name"] == "cpu"
    # A floor: only a pod that is nearly saturated adds replicas on CPU (llama.cpp's spinning
    # threads keep CPU use high under light load).
    assert cpu["target"] == {"type": "Utilization", "averageUtilization": 90}
    assert len(metrics) == 2


def test_the_adapter_rule_serves_each_pods_metric_of_the_autoscaler_per_pod(base):
    """deploy/k8s/prometheus-adapter/values.yaml has one rule per Pods metric of the HPA: the
    server's series, mapped to namespace and pod, named as the HPA asks for it."""
    rules = yaml.safe_load(ADAPTER_VALUES.read_text())["rules"]["custom"]
    metrics = one(base, "HorizontalPodAutoscaler")["spec"]["metrics"]
    for name in (m["pods"]["metric"]["name"] for m in metrics if m["type"] == "Pods"):
        (rule,) = [r for r in rules if r["name"]["as"] == name]
        assert rule["seriesQuery"].startswith(f"{name}{{")
        assert rule["resources"]["overrides"] == {
            "namespace": {"resource": "namespace"},
            "pod": {"resource": "pod"},
        }
        # One value per pod whatever the number of scrape targets: the pod's total, not a sum of copies.
        assert rule["metricsQuery"].startswith("max by (<<.GroupBy>>)")
        assert "<<.Series>>{<<.LabelMatchers>>}" in rule["metricsQuery"]
        # The gauge is the server's own (service/metrics.py; the replica test scrapes it from a pod).
        assert f'"{name}"' in (ROOT / "service" / "metrics.py").read_text()


def test_the_external_store_component_leaves_only_the_runtime_and_its_credentials(external_store):
    """components/external-state-store: no in-cluster store; the overlay's bucket and credentials."""
    kinds = {d["kind"] for d in external_store}
    assert not kinds & {"StatefulSet", "NetworkPolicy"}
    services = sorted(d["metadata"]["name"] for d in external_store if d["kind"] == "Service")
    assert services == ["universal-runtime", "universal-runtime-grpc"]
    settings = state_settings(external_store)
    assert settings["UR_STATE_URL"] == EXTERNAL_STATE_URL
    assert json.loads(settings["UR_STATE_STORAGE_OPTIONS"]) == {}  # AWS S3's own endpoint
    assert settings["AWS_ACCESS_KEY_ID"] == EXTERNAL_KEY_ID


def test_the_pod_monitor_scrapes_each_runtime_pod_once_on_its_metrics_port(pod_monitor):
    """components/pod-monitor, for the Prometheus Operator: the runtime's pods, their metrics port."""
    monitor = one(pod_monitor, "PodMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["spec"].keys() == {"selector", "podMetricsEndpoints"}
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod_labels(pod_monitor, "Deployment").items()
    assert (
        not monitor["spec"]["selector"]["matchLabels"].items()
        <= pod_labels(pod_monitor, "StatefulSet").items()
    )
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    annotations = one(pod_monitor, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    (port,) = [p for p in container(pod_monitor)["ports"] if p["name"] == endpoint["port"]]
    assert str(port["containerPort"]) == annotations["prometheus.io/port"]
    assert endpoint["path"] == annotations["prometheus.io/path"]
