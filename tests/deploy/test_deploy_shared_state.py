"""The base's shared state store (deploy/k8s/base/state-store.yaml), as rendered and as run.

The wiring of the rendered manifests: the runtime's endpoint is the store Service's name and port,
every Secret reference resolves, the store makes the bucket the runtime writes to, only the
runtime's pods may reach the S3 port, the data is on a PersistentVolume. Then two real server
processes with the rendered Deployment's state settings (UR_STATE_URL, UR_STATE_STORAGE_OPTIONS,
the AWS_* credentials from the rendered Secret), only the endpoint swapped for moto's S3 server
(the S3 API MinIO serves): what one fits, the other serves, and so does a replica restarted.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from urllib.parse import urlsplit

import boto3
import grpc
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from universal_runtime.v1 import anomaly_pb2 as pb
from universal_runtime.v1 import encoders_pb2 as e
from universal_runtime.v1 import inference_service_pb2_grpc

from tests.deploy.test_deploy import K8S, env_of, kustomize, one, pod_labels, secret_value, state_settings
from tests.gateway.test_replicas import Replica
from tests.moto_s3 import KEY, REGION, SECRET, moto_s3
from tests.service.anomaly.helpers import numeric_data, to_rows
from tests.service.test_shared_state import fit_request

STORE = "universal-runtime-state"


@pytest.fixture(scope="module")
def base() -> list[dict]:
    return kustomize(K8S / "base")


def store_container(docs: list[dict]) -> dict:
    (minio,) = one(docs, "StatefulSet", STORE)["spec"]["template"]["spec"]["containers"]
    return minio


def test_the_runtime_reaches_the_store_service_by_its_name_and_port(base):
    endpoint = urlsplit(json.loads(env_of(base)["UR_STATE_STORAGE_OPTIONS"])["endpoint_url"])
    service = one(base, "Service", endpoint.hostname)  # its short name: the same namespace
    (port,) = [p for p in service["spec"]["ports"] if p["port"] == endpoint.port]
    (target,) = [p for p in store_container(base)["ports"] if p["name"] == port["targetPort"]]
    assert endpoint.scheme == "http" and target["containerPort"] == 9000
    assert service["spec"]["selector"].items() <= pod_labels(base, "StatefulSet").items()
    assert one(base, "StatefulSet")["spec"]["serviceName"] == service["metadata"]["name"]
    assert urlsplit(env_of(base)["UR_STATE_URL"]).scheme == "s3"


def test_every_secret_reference_resolves_and_both_sides_use_the_same_credentials(base):
    refs = {}
    for kind in ("Deployment", "StatefulSet"):
        for c in one(base, kind)["spec"]["template"]["spec"]["containers"]:
            for entry in c.get("env", []):
                if "valueFrom" in entry:
                    refs[entry["name"]] = entry["valueFrom"]["secretKeyRef"]
                    secret_value(base, refs[entry["name"]])  # the Secret and its key exist
    # MinIO's root user is the runtime's S3 identity.
    assert refs["MINIO_ROOT_USER"] == refs["AWS_ACCESS_KEY_ID"]
    assert refs["MINIO_ROOT_PASSWORD"] == refs["AWS_SECRET_ACCESS_KEY"]
    # Values MinIO accepts as root credentials (at least 3 and 8 characters), so a first apply runs.
    settings = state_settings(base)
    assert len(settings["AWS_ACCESS_KEY_ID"]) >= 3 and len(settings["AWS_SECRET_ACCESS_KEY"]) >= 8


def test_the_store_makes_the_bucket_the_runtime_writes_to(base):
    minio = store_container(base)
    bucket = {entry["name"]: entry.get("value") for entry in minio["env"]}["STATE_BUCKET"]
    assert bucket == urlsplit(env_of(base)["UR_STATE_URL"]).hostname
    hook = minio["lifecycle"]["postStart"]["exec"]["command"]
    assert hook[:2] == ["sh", "-c"]
    assert 'mc mb --ignore-existing "store/$STATE_BUCKET"' in hook[2]
    # It waits for the server, a bounded number of times, on the pod's own address.
    assert "http://127.0.0.1:9000/minio/health/ready" in hook[2] and "exit 1" in hook[2]


def test_only_the_runtime_pods_reach_the_store_s3_port(base):
    policy = one(base, "NetworkPolicy")
    store, runtime = pod_labels(base, "StatefulSet"), pod_labels(base, "Deployment")
    selected = policy["spec"]["podSelector"]["matchLabels"]
    assert selected.items() <= store.items() and not selected.items() <= runtime.items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = policy["spec"]["ingress"]
    (peer,) = rule["from"]  # no namespaceSelector or ipBlock: this namespace's runtime pods only
    assert peer.keys() == {"podSelector"}
    allowed = peer["podSelector"]["matchLabels"]
    assert allowed.items() <= runtime.items() and not allowed.items() <= store.items()
    s3_port = next(p["containerPort"] for p in store_container(base)["ports"] if p["name"] == "s3")
    assert rule["ports"] == [{"protocol": "TCP", "port": s3_port}]


def test_the_store_keeps_its_data_on_a_persistent_volume(base):
    statefulset = one(base, "StatefulSet")["spec"]
    (claim,) = statefulset["volumeClaimTemplates"]
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert claim["spec"]["resources"]["requests"]["storage"].endswith("Gi")
    minio = store_container(base)
    (mount,) = [m for m in minio["volumeMounts"] if m["name"] == claim["metadata"]["name"]]
    assert minio["args"][:2] == ["server", mount["mountPath"]]
    assert statefulset["replicas"] == 1
    assert statefulset["persistentVolumeClaimRetentionPolicy"] == {
        "whenDeleted": "Retain",
        "whenScaled": "Retain",
    }


def test_the_store_pod_is_hardened_and_probed(base):
    spec = one(base, "StatefulSet")["spec"]["template"]["spec"]
    minio = store_container(base)
    assert spec["securityContext"]["runAsNonRoot"] is True and spec["automountServiceAccountToken"] is False
    security = minio["securityContext"]
    assert security["readOnlyRootFilesystem"] is True and security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert {"cpu", "memory"} <= minio["resources"]["requests"].keys() <= minio["resources"]["limits"].keys()
    probes = {name: minio[name]["httpGet"] for name in ("startupProbe", "livenessProbe", "readinessProbe")}
    assert probes["livenessProbe"] == {"path": "/minio/health/live", "port": "s3"}
    assert probes["readinessProbe"] == {"path": "/minio/health/ready", "port": "s3"}
    # The one place MinIO writes besides its volume (its certs folder, mc's config) is an emptyDir.
    empty_dirs = {v["name"] for v in spec["volumes"] if "emptyDir" in v}
    (tmp,) = [m["mountPath"] for m in minio["volumeMounts"] if m["name"] in empty_dirs]
    certs = minio["args"][minio["args"].index("--certs-dir") + 1]
    assert certs.startswith(f"{tmp}/")
    # Pinned: a release tag and its digest, never a floating tag.
    assert "@sha256:" in minio["image"] and ":RELEASE." in minio["image"]


# --- Two replicas with the base's settings --------------------------------------------------------


@pytest.fixture(scope="module")
async def replicas(base, catalog_path, tmp_path_factory):
    """Two ``universal-runtime`` processes, A and B, each with its own data dir, configured with
    the rendered Deployment's state settings; the endpoint is moto's instead of the store Service's.
    Yields the replicas and moto's S3 client."""
    settings = state_settings(base)
    bucket = urlsplit(settings["UR_STATE_URL"]).hostname
    logs = tmp_path_factory.mktemp("replicas")
    with moto_s3(bucket) as (_, moto):
        options = json.loads(settings["UR_STATE_STORAGE_OPTIONS"])
        options["endpoint_url"] = moto["endpoint_url"]  # the one change
        # A Replica's process gets this process's environment as it is when the Replica is made
        # (and keeps it across restarts); it is put back at once.
        with pytest.MonkeyPatch.context() as env:
            for name, value in {**settings, "UR_STATE_STORAGE_OPTIONS": json.dumps(options)}.items():
                env.setenv(name, value)
            started = [Replica(name, catalog_path, logs / name, logs) for name in ("a", "b")]
        client = boto3.client(
            "s3",
            endpoint_url=moto["endpoint_url"],
            aws_access_key_id=KEY,
            aws_secret_access_key=SECRET,
            region_name=REGION,
        )
        try:
            await asyncio.gather(*(replica.wait_serving() for replica in started))
            yield started, client
        finally:
            for replica in started:
                replica.stop()


async def _call(replica: Replica, method: str, request):
    async with grpc.aio.insecure_channel(f"127.0.0.1:{replica.port}") as channel:
        stub = inference_service_pb2_grpc.InferenceServiceStub(channel)
        return await getattr(stub, method)(request, timeout=120)


@pytest.mark.slow
async def test_what_one_replica_fits_the_other_serves_and_a_restart_keeps(base, replicas):
    (a, b), s3 = replicas
    rows = to_rows(numeric_data(0)[:200])
    detect = pb.DetectAnomalyRequest(detector="shared-orders", rows=rows)
    classify = e.ClassifyRequest(model="shared-router", inputs=["my parcel is late"])
    fitted = await _call(
        a, "FitAnomalyDetector", pb.FitAnomalyDetectorRequest(detector="shared-orders", rows=rows)
    )
    await _call(a, "FitClassifier", fit_request("shared-router"))

    seen = await _call(b, "DetectAnomaly", detect)
    assert seen.summary.threshold == fitted.threshold and len(seen.scores) == len(rows)
    assert (await _call(b, "Classify", classify)).classifications[0].label == "shipping"

    # The state is in the bucket of UR_STATE_URL, under its prefix, not in either pod's data dir.
    url = urlsplit(state_settings(base)["UR_STATE_URL"])
    listed = s3.list_objects_v2(Bucket=url.hostname, Prefix=url.path.lstrip("/") + "/")
    keys = [item["Key"] for item in listed.get("Contents", [])]
    assert any("/anomaly/shared-orders/" in key for key in keys), keys
    assert any("/classifiers/shared-router" in key for key in keys), keys
    for replica in (a, b):
        data_dir = Path(replica.env["UR_DATA_DIR"])
        assert not (data_dir / "anomaly").exists() and not (data_dir / "classifiers").exists()

    # A, which fitted both, dies (SIGKILL: nothing is flushed at exit) and starts again empty.
    a.kill()
    a.start()
    await a.wait_serving()
    again = await _call(a, "DetectAnomaly", detect)
    assert again.summary.threshold == fitted.threshold
    assert (await _call(a, "Classify", classify)).classifications[0].label == "shipping"


@pytest.mark.slow
async def test_a_pod_serves_the_autoscaler_metrics_on_its_scraped_port(base, replicas):
    """The HPA's Pods metrics are series the server serves on its metrics port (9090 in the pod,
    the one its prometheus.io/port annotation names), one series each: the pod's total."""
    (a, _), _ = replicas
    metrics = one(base, "HorizontalPodAutoscaler")["spec"]["metrics"]
    wanted = {m["pods"]["metric"]["name"] for m in metrics if m["type"] == "Pods"}
    async with httpx.AsyncClient(timeout=10) as http:
        text = (await http.get(f"http://127.0.0.1:{a.metrics_port}/metrics")).text
    samples = {s.name: s for family in text_string_to_metric_families(text) for s in family.samples}
    for name in wanted:
        assert name in samples, f"{name} is not served"
        assert samples[name].labels == {}, "the HPA's value must be one series per pod"
