"""A second key's sweep over every stored-object RPC and route: nothing of the first key's leaks.

Why a fuzz can miss stores shared across keys: every fuzz module called one keyless server, where
every caller is the same owner, so no case could tell "mine" from "another key's". Here key
``team-a`` stores one object of each kind (a response, a classifier, a detector, a batch file, a
batch), and key ``team-b`` calls every RPC that reads, lists, uses, deletes or refers to a stored
object, with valid requests naming ``team-a``'s objects and mutations of them (one field changed,
:func:`tests.fuzz.strategies.mutations`). The pass condition, per case:

* no INTERNAL or UNKNOWN (as in every fuzz module);
* before ``team-b`` writes anything: a request naming one of ``team-a``'s objects is never OK, and
  no OK answer (a listing) holds one of their ids or names;
* PERMISSION_DENIED only for a request that asks for the shared namespace (a refusal of a read
  would tell that the object exists);
* after ``team-b``'s writes of the same names and ids (puts, fits, overwrites): ``team-a``'s
  objects read back exactly as stored.

Then every route of the gateway (standalone and in-process) that reads, lists, uses, deletes or
refers to a stored object, with ``team-a``'s ids from a third key: 404, or a listing without them.
Both sweeps check that they
cover every RPC and route of the stored-object services, so a new one without a second-key case
fails here.
"""

from __future__ import annotations

import asyncio
import json

import grpc
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from universal_runtime.v1 import anomaly_pb2 as a
from universal_runtime.v1 import batch_pb2 as b
from universal_runtime.v1 import (
    batch_pb2_grpc,
    inference_service_pb2,
    inference_service_pb2_grpc,
    response_store_pb2_grpc,
)
from universal_runtime.v1 import encoders_pb2 as e
from universal_runtime.v1 import generation_pb2 as g
from universal_runtime.v1 import response_store_pb2 as r

from gateway.app import create_app
from service.server import start_server
from service.shared.api_keys import load_api_keys
from tests.conftest import MAX_MESSAGE_BYTES, RERANK_MODEL
from tests.fuzz.calls import BAD_CODES, STATS, invoke
from tests.fuzz.strategies import FUZZ_SETTINGS, mutations
from tests.gateway.gateway_fakes import asgi_client
from tests.service.batches.helpers import jsonl, line
from tests.service.ownership.keys import DOTS, KEYS_FILE, TEAM_A, TEAM_B, bearer, headers

A_RESPONSE = "resp_ownedByTeamA1"
A_CLASSIFIER = "owned-by-team-a"
A_DETECTOR = "owned-by-team-a"
CANARY = "CANARY-team-a"  # in the response's input items and the classifier's labels
EMBEDDER = RERANK_MODEL


@pytest.fixture(scope="module", autouse=True)
async def forget_fitted():
    """This module fits on a server of its own only: the session server is left alone."""
    yield


@pytest.fixture(scope="module")
async def keyed(settings, tmp_path_factory):
    path = tmp_path_factory.mktemp("sweep-keys") / "keys.yaml"
    path.write_text(KEYS_FILE)
    running = await start_server(
        settings.model_copy(update={"api_keys_file": path, "data_dir": tmp_path_factory.mktemp("sweep-data")})
    )
    yield running, path
    await running.stop(grace=1.0)


def _rows(seed: int) -> a.NumericRows:
    return a.NumericRows(
        column_count=3, values=np.random.default_rng(seed).normal(size=(48, 3)).ravel().tolist()
    )


def _examples() -> list[e.ClassifierExample]:
    texts = [("Where is my parcel?", f"{CANARY}-x"), ("My order is late", f"{CANARY}-x")]
    texts += [("I cannot log in", f"{CANARY}-y"), ("Reset my password", f"{CANARY}-y")]
    return [e.ClassifierExample(text=text, label=label) for text, label in texts]


@pytest.fixture(scope="module")
async def owned(keyed):
    """``team-a``'s objects, one of each kind: ``(channel, ids)``."""
    running, _ = keyed
    async with grpc.aio.insecure_channel(
        f"127.0.0.1:{running.port}", options=[("grpc.max_send_message_length", MAX_MESSAGE_BYTES)]
    ) as channel:
        as_a = bearer(TEAM_A)
        inference = inference_service_pb2_grpc.InferenceServiceStub(channel)
        batches = batch_pb2_grpc.BatchServiceStub(channel)
        items = [
            {
                "id": "msg_1",
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": CANARY}],
            }
        ]
        await response_store_pb2_grpc.ResponseStoreServiceStub(channel).PutStoredResponse(
            r.PutStoredResponseRequest(
                response=r.StoredResponse(
                    id=A_RESPONSE,
                    response_json=json.dumps({"id": A_RESPONSE, "object": "response", "output": []}).encode(),
                    input_items_json=json.dumps(items).encode(),
                )
            ),
            metadata=as_a,
        )
        await inference.FitClassifier(
            e.FitClassifierRequest(name=A_CLASSIFIER, embedding_model=EMBEDDER, examples=_examples()),
            metadata=as_a,
            timeout=120,
        )
        await inference.FitAnomalyDetector(
            a.FitAnomalyDetectorRequest(detector=A_DETECTOR, numeric_rows=_rows(0)), metadata=as_a
        )
        upload = [b.CreateFileRequest(filename="a.jsonl", purpose="batch", data=jsonl(line("a")))]
        file = (await batches.CreateFile(iter(upload), metadata=as_a)).file
        batch = (
            await batches.CreateBatch(
                b.CreateBatchRequest(input_file_id=file.id, endpoint="/v1/embeddings"), metadata=as_a
            )
        ).batch
        yield channel, {"file": file.id, "batch": batch.id}


INFERENCE = inference_service_pb2.DESCRIPTOR.services_by_name["InferenceService"]
BATCHES = b.DESCRIPTOR.services_by_name["BatchService"]
RESPONSES = r.DESCRIPTOR.services_by_name["ResponseStoreService"]


def _new_response(previous: str) -> r.NewResponse:
    return r.NewResponse(
        id="resp_teamBsOwn1",
        previous_response_id=previous,
        store=True,
        header_json=b"{}",
        input_items_json=b"[]",
    )


def read_seeds(ids: dict[str, str]) -> dict[str, object]:
    """Valid requests naming ``team-a``'s objects, by RPC: reads, lists, uses, deletes, references."""
    hello = [g.ChatMessage(role=g.CHAT_ROLE_USER, content="go on")]
    return {
        "GetStoredResponse": r.GetStoredResponseRequest(id=A_RESPONSE),
        # Continuing team-a's response; the embedder generates nothing, so a mutated one stays fast.
        "CreateResponse": r.CreateResponseRequest(
            generate=g.GenerateRequest(model=EMBEDDER, messages=hello), response=_new_response(A_RESPONSE)
        ),
        "CreateResponseStream": r.CreateResponseStreamRequest(
            generate=g.GenerateStreamRequest(model=EMBEDDER, messages=hello),
            response=_new_response(A_RESPONSE),
        ),
        "DeleteStoredResponse": r.DeleteStoredResponseRequest(id=A_RESPONSE),
        "Classify": e.ClassifyRequest(model=A_CLASSIFIER, inputs=["Where is my parcel?"]),
        "ListClassifiers": e.ListClassifiersRequest(),
        "DeleteClassifier": e.DeleteClassifierRequest(name=A_CLASSIFIER),
        "DetectAnomaly": a.DetectAnomalyRequest(detector=A_DETECTOR, numeric_rows=_rows(1)),
        "ListAnomalyDetectors": a.ListAnomalyDetectorsRequest(),
        "DeleteAnomalyDetector": a.DeleteAnomalyDetectorRequest(detector=A_DETECTOR),
        "GetFile": b.GetFileRequest(id=ids["file"]),
        "GetFileContent": b.GetFileContentRequest(id=ids["file"]),
        "DeleteFile": b.DeleteFileRequest(id=ids["file"]),
        "ListFiles": b.ListFilesRequest(),
        "CreateBatch": b.CreateBatchRequest(input_file_id=ids["file"], endpoint="/v1/embeddings"),
        "GetBatch": b.GetBatchRequest(id=ids["batch"]),
        "ListBatches": b.ListBatchesRequest(),
        "CancelBatch": b.CancelBatchRequest(id=ids["batch"]),
    }


def write_seeds() -> dict[str, object]:
    """Valid writes from ``team-b`` of ``team-a``'s names and ids (each key's own namespace)."""
    return {
        "PutStoredResponse": r.PutStoredResponseRequest(
            response=r.StoredResponse(id=A_RESPONSE, response_json=b"{}", input_items_json=b"[]")
        ),
        "FitClassifier": e.FitClassifierRequest(
            name=A_CLASSIFIER,
            embedding_model=EMBEDDER,
            examples=[
                e.ClassifierExample(text="cats", label="c"),
                e.ClassifierExample(text="dogs", label="d"),
            ],
            overwrite=True,
        ),
        "FitAnomalyDetector": a.FitAnomalyDetectorRequest(detector=A_DETECTOR, numeric_rows=_rows(2)),
    }


#: Stored-object RPCs without a sweep case, and why.
EXEMPT_RPCS = {
    "CreateFile": "makes a new file under an id the server chooses: names nothing stored",
    "StreamDetectAnomaly": "keeps its rolling window in the call: nothing stored",
}

# Drawn for the mutated field: mostly team-a's names and ids (so the lookups run), or anything.
_NAMES = st.one_of(
    st.sampled_from([A_CLASSIFIER, A_RESPONSE, "", "..", "owned-by-team-a/../x"]), st.text(max_size=12)
)
OVERRIDES = {
    "model": _NAMES,
    "name": _NAMES,
    "detector": _NAMES,
    "id": _NAMES,
    "input_file_id": _NAMES,
    "embedding_model": st.just(EMBEDDER),
    "keep_alive": st.sampled_from(["", "5m"]),
}


def _stored_object_rpcs() -> set[str]:
    stored = {m.name for service in (RESPONSES, BATCHES) for m in service.methods}
    stored |= {m.name for m in INFERENCE.methods if "Classifier" in m.name or "AnomalyDetector" in m.name}
    return stored | {"Classify", "DetectAnomaly", "StreamDetectAnomaly"}


def test_the_sweep_covers_every_stored_object_rpc():
    covered = set(read_seeds({"file": "", "batch": ""})) | set(write_seeds()) | set(EXEMPT_RPCS)
    assert covered == _stored_object_rpcs()


def _method_of(name: str):
    for service in (INFERENCE, BATCHES, RESPONSES):
        if name in service.methods_by_name:
            return service.methods_by_name[name]
    raise KeyError(name)


async def _case(channel, name: str, request, *, before_writes: bool, canaries: tuple[str, ...]) -> None:
    method = _method_of(name)
    replies: list[bytes] = []
    code, details = await invoke(channel, method, [request], metadata=bearer(TEAM_B), replies=replies)
    STATS[f"second-key {name}:{code.name}"] += 1
    assert code not in BAD_CODES, f"{name} answered {code.name} ({details}) to {request!r}"
    if code is grpc.StatusCode.PERMISSION_DENIED:
        assert getattr(request, "shared", False), f"{name} refused a read of another key's: {request!r}"
    if before_writes and code is grpc.StatusCode.OK:
        text = str(request)
        named = [canary for canary in canaries if f'"{canary}"' in text]
        assert not named, f"{name} answered OK to team-b for team-a's {named}: {request!r}"
        leaked = [canary for canary in (*canaries, CANARY) if any(canary.encode() in raw for raw in replies)]
        assert not leaked, f"{name} showed team-b team-a's {leaked}"


async def _sweep(
    channel, seeds: dict[str, object], *, before_writes: bool, canaries: tuple[str, ...]
) -> None:
    loop = asyncio.get_running_loop()
    for name, seed in seeds.items():

        @FUZZ_SETTINGS
        @given(request=st.one_of(st.just(seed), mutations(seed, OVERRIDES)))
        def fuzz(request) -> None:
            coroutine = _case(channel, name, request, before_writes=before_writes, canaries=canaries)  # noqa: B023
            asyncio.run_coroutine_threadsafe(coroutine, loop).result()

        await asyncio.to_thread(fuzz)


async def _team_a_still_has_everything(channel, ids: dict[str, str]) -> None:
    as_a = bearer(TEAM_A)
    stored = await response_store_pb2_grpc.ResponseStoreServiceStub(channel).GetStoredResponse(
        r.GetStoredResponseRequest(id=A_RESPONSE), metadata=as_a
    )
    assert CANARY in stored.response.input_items_json.decode()
    inference = inference_service_pb2_grpc.InferenceServiceStub(channel)
    listed = await inference.ListClassifiers(e.ListClassifiersRequest(), metadata=as_a)
    mine = [c for c in listed.classifiers if c.name == A_CLASSIFIER]
    assert [(list(c.labels), c.shared) for c in mine] == [([f"{CANARY}-x", f"{CANARY}-y"], False)]
    detectors = await inference.ListAnomalyDetectors(a.ListAnomalyDetectorsRequest(), metadata=as_a)
    assert [(d.version, d.row_count) for d in detectors.detectors if d.detector == A_DETECTOR] == [(1, 48)]
    batches = batch_pb2_grpc.BatchServiceStub(channel)
    assert (await batches.GetFile(b.GetFileRequest(id=ids["file"]), metadata=as_a)).file.id == ids["file"]
    assert (await batches.GetBatch(b.GetBatchRequest(id=ids["batch"]), metadata=as_a)).batch.id == ids[
        "batch"
    ]


async def test_a_second_key_never_reaches_the_first_keys_objects_over_grpc(owned):
    channel, ids = owned
    canaries = (A_RESPONSE, A_CLASSIFIER, A_DETECTOR, ids["file"], ids["batch"])
    await _sweep(channel, read_seeds(ids), before_writes=True, canaries=canaries)
    await _team_a_still_has_everything(channel, ids)
    await _sweep(channel, write_seeds(), before_writes=False, canaries=canaries)
    await _team_a_still_has_everything(channel, ids)


# -- the gateway's routes ------------------------------------------------------------------------

#: Routes of the stored-object surfaces without a sweep case, and why.
EXEMPT_ROUTES = {
    ("post", "/v1/responses"): "without previous_response_id it makes a new response (swept with one below)",
    ("post", "/v1/files"): "makes a new file under an id the server chooses",
    ("post", "/v1/classifiers"): "fits the key's own (the gRPC sweep fits team-a's names from team-b)",
    ("post", "/v1/anomaly/fit"): "fits the key's own (as above)",
}
STORED_PREFIXES = ("/v1/responses", "/v1/files", "/v1/batches", "/v1/classif", "/v1/anomaly")


def route_cases(ids: dict[str, str]) -> dict[tuple[str, str], tuple[str, dict | None, str | None]]:
    """By (method, route): the concrete path, the JSON body, and the name another key must not see
    in the listing (``None``: the answer must be 404)."""
    rows = np.random.default_rng(1).normal(size=(8, 3)).tolist()
    response_path = f"/v1/responses/{A_RESPONSE}"
    return {
        ("get", "/v1/responses/{response_id}"): (response_path, None, None),
        ("delete", "/v1/responses/{response_id}"): (response_path, None, None),
        ("get", "/v1/responses/{response_id}/input_items"): (f"{response_path}/input_items", None, None),
        ("post", "/v1/responses#previous_response_id"): (
            "/v1/responses",
            {"model": "any", "input": "go on", "previous_response_id": A_RESPONSE},
            None,
        ),
        ("post", "/v1/classify"): ("/v1/classify", {"model": A_CLASSIFIER, "input": "x"}, None),
        ("get", "/v1/classifiers"): ("/v1/classifiers", None, A_CLASSIFIER),
        ("delete", "/v1/classifiers/{name}"): (f"/v1/classifiers/{A_CLASSIFIER}", None, None),
        ("post", "/v1/anomaly/detect"): ("/v1/anomaly/detect", {"detector": A_DETECTOR, "rows": rows}, None),
        ("get", "/v1/anomaly/detectors"): ("/v1/anomaly/detectors", None, A_DETECTOR),
        ("delete", "/v1/anomaly/detectors/{name}"): (f"/v1/anomaly/detectors/{A_DETECTOR}", None, None),
        ("get", "/v1/files"): ("/v1/files", None, ids["file"]),
        ("get", "/v1/files/{file_id}"): (f"/v1/files/{ids['file']}", None, None),
        ("delete", "/v1/files/{file_id}"): (f"/v1/files/{ids['file']}", None, None),
        ("get", "/v1/files/{file_id}/content"): (f"/v1/files/{ids['file']}/content", None, None),
        ("get", "/v1/batches"): ("/v1/batches", None, ids["batch"]),
        ("post", "/v1/batches"): (
            "/v1/batches",
            {"input_file_id": ids["file"], "endpoint": "/v1/embeddings", "completion_window": "24h"},
            None,
        ),
        ("get", "/v1/batches/{batch_id}"): (f"/v1/batches/{ids['batch']}", None, None),
        ("post", "/v1/batches/{batch_id}/cancel"): (f"/v1/batches/{ids['batch']}/cancel", None, None),
    }


def test_the_route_sweep_covers_every_stored_object_route():
    paths = create_app("127.0.0.1:1").openapi()["paths"]
    routes = {(verb, path) for path, ops in paths.items() if path.startswith(STORED_PREFIXES) for verb in ops}
    covered = {(verb, path.partition("#")[0]) for verb, path in route_cases({"file": "", "batch": ""})}
    assert routes == covered | set(EXEMPT_ROUTES)


@pytest.mark.parametrize("mode", ["grpc", "in-process"])
async def test_a_second_key_gets_404_on_every_stored_object_route(keyed, owned, mode):
    running, keys_file = keyed
    channel, ids = owned
    app = create_app(
        f"127.0.0.1:{running.port}",
        max_message_bytes=MAX_MESSAGE_BYTES,
        api_keys=load_api_keys(None, keys_file),
        wrap_channel=running.in_process.channel if mode == "in-process" else None,
    )
    async with asgi_client(app) as client:
        for (verb, route), (path, body, hidden) in route_cases(ids).items():
            # Key '..', which writes nothing: team-b's own of those names may exist by now.
            response = await client.request(verb.upper(), path, json=body, headers=headers(DOTS))
            if hidden is None:
                assert response.status_code == 404, f"{verb} {route}: {response.status_code} {response.text}"
            else:
                assert response.status_code == 200 and hidden not in response.text, f"{verb} {route}"
            assert CANARY not in response.text
    await _team_a_still_has_everything(channel, ids)
