"""deploy/k8s/overlays/inference-gateway and deploy/kserve: rendered, validated and wired together.

Each is rendered with ``kubectl kustomize``. Core objects are validated against the Kubernetes
schemas (kubernetes-validate, strict); the Gateway API, GIE/llm-d and KServe objects and the
EPP's config file against the JSON schemas in ``tests/deploy/schemas`` (written from the CRDs
of the pinned releases; each file names its source). Then the references between the objects,
and between the manifests and the server, are checked: pool selector and pods, target port and
container port, EPP Service and the pool's endpointPickerRef, the metric names the EPP reads and
the ones the server emits, the HTTPRoute and the gateway's routes, KServe's runtime and the
settings and catalog it names.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from referencing import Registry, Resource

from gateway.app import create_app
from service.catalog import load_catalog
from service.metrics import ModelStateCollector
from service.settings import Settings
from tests.deploy.test_deploy import INFERENCE_SERVICE, K8S, KUBE_VERSION, ROOT, kustomize, one

# A fixture (kubernetes-validate, skipped where the dev extra is not installed), shared with test_deploy.
from tests.deploy.test_deploy import kubernetes_validate as kubernetes_validate

OVERLAY = K8S / "overlays" / "inference-gateway"
KSERVE = ROOT / "deploy" / "kserve"
SCHEMAS = Path(__file__).resolve().parent / "schemas"
MODEL_SERVER = "universal-runtime"
EPP = "universal-runtime-epp"
# Where KServe's storage initializer puts a model's storageUri (constants.DefaultModelLocalMountPath).
KSERVE_MODEL_DIR = "/mnt/models"
# The metric flags GIE v1.5.0 and llm-d-router refuse at start-up (EndpointPickerConfig instead).
REFUSED_EPP_FLAGS = (
    "--total-queued-requests-metric",
    "--total-running-requests-metric",
    "--kv-cache-usage-percentage-metric",
    "--lora-info-metric",
    "--cache-info-metric",
)
# Label names the EPP's core-metrics-extractor reads from the info gauges (its defaults).
LORA_LABELS = {"running_lora_adapters", "waiting_lora_adapters", "max_lora"}
CACHE_LABELS = {"block_size"}


# --- Rendering and schemas -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gie() -> list[dict]:
    return kustomize(OVERLAY)


@pytest.fixture(scope="module")
def kserve() -> list[dict]:
    return kustomize(KSERVE)


@pytest.fixture(scope="module")
def base() -> list[dict]:
    return kustomize(K8S / "base")


def load_schemas() -> dict[tuple[str, str], jsonschema.Draft202012Validator]:
    """One validator per (apiVersion, kind), read from the ``const`` of each schema in SCHEMAS."""
    documents = {path.name: json.loads(path.read_text()) for path in SCHEMAS.glob("*.json")}
    registry = Registry().with_resources(
        (name, Resource.from_contents(schema)) for name, schema in documents.items()
    )
    validators = {}
    for schema in documents.values():
        properties = schema.get("properties", {})
        if "apiVersion" in properties:
            jsonschema.Draft202012Validator.check_schema(schema)
            key = (properties["apiVersion"]["const"], properties["kind"]["const"])
            validators[key] = jsonschema.Draft202012Validator(
                schema, registry=registry, format_checker=jsonschema.FormatChecker()
            )
    return validators


@pytest.fixture(scope="module")
def schemas() -> dict[tuple[str, str], jsonschema.Draft202012Validator]:
    return load_schemas()


def schema_key(doc: dict) -> tuple[str, str]:
    return doc["apiVersion"], doc["kind"]


def epp_config(docs: list[dict]) -> dict:
    """The EndpointPickerConfig the EPP reads: the generated ConfigMap's file."""
    configmap = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith(EPP))
    return yaml.safe_load(configmap["data"]["epp-config.yaml"])


def epp_container(docs: list[dict]) -> dict:
    (container,) = one(docs, "Deployment", EPP)["spec"]["template"]["spec"]["containers"]
    return container


def epp_args(docs: list[dict]) -> dict[str, str]:
    """The EPP's ``--flag=value`` arguments as a dict (every flag is written in that form)."""
    args = {}
    for arg in epp_container(docs)["args"]:
        flag, separator, value = arg.partition("=")
        assert separator, f"{arg}: write EPP flags as --flag=value"
        args[flag] = value
    return args


def model_server_container(docs: list[dict]) -> dict:
    (container,) = one(docs, "Deployment", MODEL_SERVER)["spec"]["template"]["spec"]["containers"]
    return container


@pytest.mark.parametrize("rendering", ["gie", "kserve"])
def test_every_rendered_object_is_validated(rendering, request, schemas, kubernetes_validate):
    """Our CRD objects against our schemas, everything else against Kubernetes' own, strictly."""
    docs = request.getfixturevalue(rendering)
    checked = set()
    for doc in docs:
        if schema_key(doc) in schemas:
            schemas[schema_key(doc)].validate(doc)
            checked.add(schema_key(doc))
        else:
            kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
    expected = {
        "gie": {
            ("inference.networking.k8s.io/v1", "InferencePool"),
            ("llm-d.ai/v1alpha2", "InferenceObjective"),
            ("gateway.networking.k8s.io/v1", "Gateway"),
            ("gateway.networking.k8s.io/v1", "HTTPRoute"),
        },
        "kserve": {
            ("serving.kserve.io/v1alpha1", "ServingRuntime"),
            ("serving.kserve.io/v1beta1", "InferenceService"),
        },
    }[rendering]
    assert checked == expected


def test_epp_config_validates(gie, schemas):
    config = epp_config(gie)
    schemas[schema_key(config)].validate(config)


# Each case breaks one thing a CRD (or the EPP's strict decoder) refuses; our schema must refuse it too.
BROKEN = {
    "pool: unknown spec field": ("InferencePool", lambda d: d["spec"].update(targetPort=8000)),
    "pool: port 0": ("InferencePool", lambda d: d["spec"]["targetPorts"][0].update(number=0)),
    "pool: same port twice": (
        "InferencePool",
        lambda d: d["spec"]["targetPorts"].append(dict(d["spec"]["targetPorts"][0])),
    ),
    "pool: no selector": ("InferencePool", lambda d: d["spec"].pop("selector")),
    "pool: picker Service without port": (
        "InferencePool",
        lambda d: d["spec"]["endpointPickerRef"].pop("port"),
    ),
    "pool: unknown failureMode": (
        "InferencePool",
        lambda d: d["spec"]["endpointPickerRef"].update(failureMode="Open"),
    ),
    "objective: no poolRef": ("InferenceObjective", lambda d: d["spec"].pop("poolRef")),
    "objective: criticality (an older field)": (
        "InferenceObjective",
        lambda d: d["spec"].update(criticality="Critical"),
    ),
    "gateway: no listeners": ("Gateway", lambda d: d["spec"].update(listeners=[])),
    "route: Service backend without port": (
        "HTTPRoute",
        lambda d: d["spec"]["rules"][0]["backendRefs"][0].update(group="", kind="Service"),
    ),
    "route: relative path": (
        "HTTPRoute",
        lambda d: d["spec"]["rules"][0]["matches"][0]["path"].update(value="v1"),
    ),
    "route: bad timeout": ("HTTPRoute", lambda d: d["spec"]["rules"][0]["timeouts"].update(request="5 min")),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_schemas_refuse_what_the_crds_refuse(case, gie, schemas):
    kind, breaks = BROKEN[case]
    doc = copy.deepcopy(next(d for d in gie if d["kind"] == kind))
    schemas[schema_key(doc)].validate(doc)
    breaks(doc)
    with pytest.raises(jsonschema.ValidationError):
        schemas[schema_key(doc)].validate(doc)


BROKEN_EPP_CONFIG = {
    "unknown top-level key (strict decoding)": lambda c: c.update(data={"sources": []}),
    "unknown plugin type": lambda c: c["plugins"].append({"type": "queue-scorer-v2"}),
    "extractor parameter misspelt": lambda c: next(
        p for p in c["plugins"] if p["type"] == "core-metrics-extractor"
    )["parameters"]["engineConfigs"][0].update(queuedRequestSpec="ur_requests_waiting"),
    "scrape interval without a unit": lambda c: next(
        p for p in c["plugins"] if p["type"] == "metrics-data-source"
    )["parameters"].update(interval="200"),
    "old apiVersion": lambda c: c.update(apiVersion="inference.networking.x-k8s.io/v1alpha1"),
}


@pytest.mark.parametrize("case", list(BROKEN_EPP_CONFIG))
def test_epp_config_schema_refuses(case, gie, schemas):
    config = epp_config(gie)
    validator = schemas[schema_key(config)]
    BROKEN_EPP_CONFIG[case](config)
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(config)


# --- The inference-gateway overlay: wiring ---------------------------------------------------------


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return selector.items() <= labels.items()


def pod_templates(docs: list[dict]) -> dict[str, dict[str, str]]:
    """Pod labels of every workload in ``docs``, by workload name."""
    return {
        doc["metadata"]["name"]: doc["spec"]["template"]["metadata"]["labels"]
        for doc in docs
        if doc["kind"] in ("Deployment", "StatefulSet", "DaemonSet")
    }


def test_the_pool_selects_the_model_server_pods_only(gie):
    selector = one(gie, "InferencePool")["spec"]["selector"]["matchLabels"]
    selected = {name for name, labels in pod_templates(gie).items() if matches(selector, labels)}
    # Not the EPP, not the state store: only pods that serve the API and the protocol gauges.
    assert selected == {MODEL_SERVER}


def test_gateway_proxy_pods_stay_out_of_the_pool(gie):
    """Istio and kgateway copy a Gateway's labels onto the proxy pods they deploy for it."""
    labels = one(gie, "Gateway")["metadata"]["labels"]
    selectors = [one(gie, "InferencePool")["spec"]["selector"]["matchLabels"]]
    selectors += [doc["spec"]["selector"] for doc in gie if doc["kind"] == "Service"]
    for selector in selectors:
        assert not matches(selector, labels)


def test_the_pool_targets_the_port_the_gateway_serves(gie):
    pool = one(gie, "InferencePool")["spec"]
    (target,) = pool["targetPorts"]
    ports = {port["name"]: port["containerPort"] for port in model_server_container(gie)["ports"]}
    assert target["number"] == ports["http"]
    # The in-process gateway listens there (UR_GATEWAY_PORT is left at its default in the base).
    env = {entry["name"] for entry in model_server_container(gie)["env"]}
    assert "UR_GATEWAY_PORT" not in env
    assert target["number"] == Settings.model_fields["gateway_port"].default
    assert pool["appProtocol"] == "http"


def test_the_pool_names_the_epp_service_and_its_ext_proc_port(gie):
    ref = one(gie, "InferencePool")["spec"]["endpointPickerRef"]
    assert ref.get("kind", "Service") == "Service"
    service = one(gie, "Service", ref["name"])
    (port,) = [p for p in service["spec"]["ports"] if p["port"] == ref["port"]["number"]]
    assert port["appProtocol"] == "kubernetes.io/h2c"
    container = epp_container(gie)
    target = {p["name"]: p["containerPort"] for p in container["ports"]}[port["targetPort"]]
    assert target == int(epp_args(gie)["--grpc-port"])
    deployment = one(gie, "Deployment", EPP)
    assert matches(service["spec"]["selector"], deployment["spec"]["template"]["metadata"]["labels"])


def test_the_epp_serves_the_pool_in_its_namespace(gie):
    args = epp_args(gie)
    pool = one(gie, "InferencePool")
    assert args["--pool-name"] == pool["metadata"]["name"]
    assert args["--pool-group"] == pool["apiVersion"].split("/")[0]
    # No --pool-namespace: the EPP takes NAMESPACE, which must come from the pod's own namespace.
    assert "--pool-namespace" not in args
    env = {entry["name"]: entry for entry in epp_container(gie)["env"]}
    assert env["NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"


def test_the_epp_reads_its_config_from_the_generated_configmap(gie):
    args = epp_args(gie)
    container = epp_container(gie)
    (mount,) = [
        m for m in container["volumeMounts"] if args["--config-file"].startswith(m["mountPath"] + "/")
    ]
    pod = one(gie, "Deployment", EPP)["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    configmap = one(gie, "ConfigMap", volume["configMap"]["name"])
    assert args["--config-file"].removeprefix(mount["mountPath"] + "/") in configmap["data"]


def test_the_epp_probes_its_grpc_health_port(gie):
    container = epp_container(gie)
    health = int(epp_args(gie)["--grpc-health-port"])
    assert health in {p["containerPort"] for p in container["ports"]}
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["grpc"] == {"port": health, "service": "inference-extension"}


def protocol_families() -> dict[str, Any]:
    """The per-pod gauges the server's collector emits, by name (a manager with no models)."""

    class NoModels:
        def models(self) -> list:
            return []

    return {family.name: family for family in ModelStateCollector(NoModels()).collect()}


def test_the_epp_reads_gauges_the_server_emits(gie):
    config = epp_config(gie)
    (extractor,) = [p for p in config["plugins"] if p["type"] == "core-metrics-extractor"]
    parameters = extractor["parameters"]
    engines = {engine["name"]: engine for engine in parameters["engineConfigs"]}
    # Our pods carry no engine-type label, so the default engine's names are the ones read.
    engine = engines[parameters["defaultEngine"]]
    emitted = protocol_families()
    specs = {key: value for key, value in engine.items() if key.endswith("Spec")}
    assert set(specs) == {
        "queuedRequestsSpec",
        "runningRequestsSpec",
        "kvUsageSpec",
        "loraSpec",
        "cacheInfoSpec",
    }
    for key, name in specs.items():
        assert name in emitted, f"{key}: the server emits no {name}"
        assert name.startswith("ur_"), f"{key}: {name} (the documented names are ur_*)"
    lora_labels = set(emitted[specs["loraSpec"]].samples[0].labels)
    assert lora_labels >= LORA_LABELS
    assert set(emitted[specs["cacheInfoSpec"]].samples[0].labels) >= CACHE_LABELS
    assert not set(REFUSED_EPP_FLAGS) & set(epp_args(gie))


def test_the_epp_config_references_resolve(gie):
    config = epp_config(gie)
    plugins = {plugin.get("name", plugin["type"]): plugin["type"] for plugin in config["plugins"]}
    references = [p["pluginRef"] for profile in config["schedulingProfiles"] for p in profile["plugins"]]
    for source in config["dataLayer"]["sources"]:
        references += [source["pluginRef"], *(e["pluginRef"] for e in source["extractors"])]
    references += [p["pluginRef"] for p in config["requestHandler"]["parsers"]]
    assert set(references) <= set(plugins)
    scorers = {ref["pluginRef"] for ref in config["schedulingProfiles"][0]["plugins"]}
    assert {plugins[s] for s in scorers} == {
        "queue-scorer",
        "kv-cache-utilization-scorer",
        "prefix-cache-scorer",
        "lora-affinity-scorer",
    }
    # The parser that claims no path must come last: parsers after it are never used.
    assert plugins[config["requestHandler"]["parsers"][-1]["pluginRef"]] == "passthrough-parser"


def test_the_route_sends_the_gateway_to_the_pool(gie):
    route = one(gie, "HTTPRoute")["spec"]
    gateway = one(gie, "Gateway")
    pool = one(gie, "InferencePool")
    (parent,) = route["parentRefs"]
    assert (parent["group"], parent["kind"], parent["name"]) == (
        gateway["apiVersion"].split("/")[0],
        gateway["kind"],
        gateway["metadata"]["name"],
    )
    backends = [backend for rule in route["rules"] for backend in rule["backendRefs"]]
    assert backends
    for backend in backends:
        assert (backend["group"], backend["kind"], backend["name"]) == (
            pool["apiVersion"].split("/")[0],
            "InferencePool",
            pool["metadata"]["name"],
        )


def route_matches(route: dict, path: str) -> bool:
    """Whether one of the route's path matches takes ``path`` (Gateway API's Exact and PathPrefix)."""
    for rule in route["spec"]["rules"]:
        for match in rule["matches"]:
            kind, value = match["path"]["type"], match["path"]["value"]
            if kind == "Exact" and path == value:
                return True
            # PathPrefix matches whole path elements: /v1 takes /v1/models, not /v1x.
            if kind == "PathPrefix" and (path == value or path.startswith(value.rstrip("/") + "/")):
                return True
    return False


def test_the_route_takes_every_api_route_and_keeps_metrics_inside(gie):
    route = one(gie, "HTTPRoute")
    served = set(create_app("127.0.0.1:1").openapi()["paths"])
    internal = {"/metrics", "/health"}
    assert internal <= served
    unrouted = {path for path in served - internal if not route_matches(route, path)}
    assert not unrouted, f"the gateway serves these, the HTTPRoute does not route them: {unrouted}"
    assert not any(route_matches(route, path) for path in (*internal, "/docs", "/openapi.json"))


def test_objectives_name_the_pool(gie):
    pool = one(gie, "InferencePool")
    objectives = [d for d in gie if d["kind"] == "InferenceObjective"]
    assert {o["metadata"]["name"] for o in objectives} == {"generation", "encoder", "document", "bulk"}
    for objective in objectives:
        ref = objective["spec"]["poolRef"]
        assert (ref["group"], ref["kind"], ref["name"]) == (
            pool["apiVersion"].split("/")[0],
            pool["kind"],
            pool["metadata"]["name"],
        )
    # Only the offline class is sheddable (a negative priority).
    assert [o["metadata"]["name"] for o in objectives if o["spec"]["priority"] < 0] == ["bulk"]


def test_the_epp_may_read_what_it_watches(gie):
    pod = one(gie, "Deployment", EPP)["spec"]["template"]["spec"]
    binding = one(gie, "RoleBinding", EPP)
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": EPP}
    assert {"kind": "ServiceAccount", "name": pod["serviceAccountName"]} in binding["subjects"]
    one(gie, "ServiceAccount", pod["serviceAccountName"])
    allowed = {
        (group, resource)
        for rule in one(gie, "Role", EPP)["rules"]
        if {"get", "list", "watch"} <= set(rule["verbs"])
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    groups = {doc["kind"]: doc["apiVersion"].split("/")[0] for doc in gie}
    assert {
        ("", "pods"),
        (groups["InferencePool"], "inferencepools"),
        (groups["InferenceObjective"], "inferenceobjectives"),
    } <= allowed
    assert pod["automountServiceAccountToken"] is True


def test_the_epp_runs_like_the_base_pods(gie):
    pod = one(gie, "Deployment", EPP)["spec"]["template"]["spec"]
    container = epp_container(gie)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert {"cpu", "memory"} <= set(container["resources"]["requests"])
    image, _, tag = container["image"].rpartition(":")
    assert image == "ghcr.io/llm-d/llm-d-router-endpoint-picker"
    assert tag == "v0.10.0"


def test_the_base_stays_whole_under_the_overlay(gie, base):
    """The overlay adds objects and changes none of the base's: its Services work without GIE."""
    for doc in base:
        assert doc in gie, f"{doc['kind']} {doc['metadata']['name']} changed by the overlay"
    added = [doc for doc in gie if doc not in base]
    assert Counter(doc["kind"] for doc in added) == {
        **dict.fromkeys(("InferencePool", "Gateway", "HTTPRoute"), 1),
        "InferenceObjective": 4,
        **dict.fromkeys(("Deployment", "Service", "ServiceAccount", "Role", "RoleBinding", "ConfigMap"), 1),
    }
    assert all(
        doc["metadata"]["name"].startswith(EPP)
        for doc in added
        if doc["kind"] in ("Deployment", "Service", "ServiceAccount", "Role", "RoleBinding", "ConfigMap")
    )


# --- KServe ----------------------------------------------------------------------------------------


def runtime_container(docs: list[dict]) -> dict:
    (container,) = one(docs, "ServingRuntime")["spec"]["containers"]
    return container


def test_the_runtime_and_predictor_make_a_valid_pod(kserve, kubernetes_validate):
    """What KServe builds: the runtime's container with the model's fields, the predictor's pod fields."""
    runtime = one(kserve, "ServingRuntime")["spec"]
    predictor = copy.deepcopy(one(kserve, "InferenceService")["spec"]["predictor"])
    model = predictor.pop("model")
    for kserve_only in ("minReplicas", "maxReplicas", "scaleMetric", "scaleTarget"):
        predictor.pop(kserve_only, None)
    container = {
        **runtime_container(kserve),
        **{k: model[k] for k in ("resources", "env", "args") if k in model},
    }
    # The storage initializer's volume, which KServe mounts read-only at /mnt/models.
    container["volumeMounts"] = [
        *container["volumeMounts"],
        {"name": "kserve-provision-location", "mountPath": KSERVE_MODEL_DIR, "readOnly": True},
    ]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "predictor"},
        "spec": {
            **predictor,
            "containers": [container],
            "volumes": [*runtime["volumes"], {"name": "kserve-provision-location", "emptyDir": {}}],
        },
    }
    kubernetes_validate.validate(pod, KUBE_VERSION, strict=True)
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert mounts == {"/tmp", "/data", "/cache", KSERVE_MODEL_DIR}


def test_the_inference_service_selects_the_runtime(kserve):
    runtime = one(kserve, "ServingRuntime")
    isvc = one(kserve, "InferenceService")
    model = isvc["spec"]["predictor"]["model"]
    assert model["runtime"] == runtime["metadata"]["name"]
    formats = {(f["name"], f.get("version")) for f in runtime["spec"]["supportedModelFormats"]}
    assert (model["modelFormat"]["name"], model["modelFormat"].get("version")) in formats
    # Standard mode: Knative would refuse a runtime with more than one port.
    assert isvc["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == "Standard"
    assert runtime_container(kserve)["name"] == "kserve-container"


def test_kserve_pods_stay_out_of_the_base_selectors(kserve, base):
    """KServe copies the InferenceService's and the runtime's labels onto the predictor pods."""
    isvc = one(kserve, "InferenceService")
    pod_labels = {**one(kserve, "ServingRuntime")["spec"].get("labels", {}), **isvc["metadata"]["labels"]}
    selectors = [doc["spec"]["selector"] for doc in base if doc["kind"] in ("Service", "PodDisruptionBudget")]
    for selector in selectors:
        assert not matches(selector.get("matchLabels", selector), pod_labels)


def test_the_runtime_ports_and_probes_are_the_servers(kserve):
    container = runtime_container(kserve)
    ports = container["ports"]
    defaults = Settings.model_fields
    # KServe maps the first container port to the predictor Service's port 80: the HTTP face.
    assert ports[0]["containerPort"] == defaults["gateway_port"].default
    (grpc,) = [p for p in ports if p["containerPort"] == defaults["grpc_port"].default]
    assert "grpc" in grpc["name"]  # KServe gives such a port appProtocol kubernetes.io/h2c
    assert {p["containerPort"] for p in ports} == {8000, 50051, defaults["metrics_port"].default}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["grpc"]["port"] == grpc["containerPort"]
    assert container["readinessProbe"]["grpc"]["service"] == INFERENCE_SERVICE
    metrics = one(kserve, "ServingRuntime")["spec"]["annotations"]
    assert int(metrics["prometheus.kserve.io/port"]) == defaults["metrics_port"].default


def test_the_runtime_settings_exist_and_point_at_the_model_repository(kserve):
    env = {entry["name"]: entry["value"] for entry in runtime_container(kserve)["env"]}
    fields = {f"UR_{name.upper()}" for name in Settings.model_fields}
    assert set(env) <= fields, f"not server settings: {set(env) - fields}"
    assert Path(env["UR_CATALOG_PATH"]).parent == Path(KSERVE_MODEL_DIR)


def test_the_example_model_repository_loads_from_the_mount():
    catalog = load_catalog(KSERVE / "model-repository" / "catalog.yaml")
    assert catalog.specs and not catalog.invalid
    for spec in catalog.specs.values():
        assert Path(spec.source).is_relative_to(KSERVE_MODEL_DIR), spec.source
