"""Fuzz every RPC with valid requests changed in one field, on a server of its own.

Requests generated whole (``test_grpc_fuzz.py``) mostly stop at the first validation check.
Here each case starts from a request the server accepts (one seed per RPC) and clears or
replaces one field at any depth (:func:`tests.fuzz.strategies.mutations`), so the odd value
travels past validation into the tasks and engines. The server has the embedded default
catalog and a data folder of its own, so LoadModel and UnloadModel may load and unload any of
its models (with the session server they could only name models that do not exist).

Pass condition as in ``test_grpc_fuzz.py``: no INTERNAL or UNKNOWN, an answer within the deadline
plus one second, and the server healthy after each RPC's run. Budget: ``UR_FUZZ_EXAMPLES`` cases
per RPC.
"""

from __future__ import annotations

import io
import math
import os
import pickle
import shutil
import tempfile
from pathlib import Path

import grpc
import pytest
import yaml
from google.protobuf import struct_pb2
from hypothesis import strategies as st
from PIL import Image, ImageDraw
from universal_runtime.v1 import anomaly_pb2 as a
from universal_runtime.v1 import documents_pb2 as d
from universal_runtime.v1 import encoders_pb2 as e
from universal_runtime.v1 import generation_pb2 as g
from universal_runtime.v1 import (
    images_pb2,
    inference_service_pb2,
    inference_service_pb2_grpc,
    model_service_pb2,
    ocr_pb2,
    response_store_pb2,
    response_store_pb2_grpc,
    speech_pb2,
)
from universal_runtime.v1 import model_service_pb2 as m
from universal_runtime.v1 import response_store_pb2 as r
from universal_runtime.v1 import tokenization_pb2 as t

from engines.registry import registered_backends
from service.server import start_server
from service.settings import Settings
from tests.engines.images.tiny_pipeline import build_tiny_pipeline
from tests.fuzz.calls import assert_healthy, fuzz_rpc, invoke
from tests.fuzz.strategies import mutations
from tests.spoken import spoken_wav

CHAT = "smollm2-135m-instruct"
EMBED = "all-minilm-l6-v2"
DETECTOR = "fuzz-seed-detector"
CLASSIFIER = "fuzz-seed-classifier"
IMAGE = "tiny-sd"

#: Where the pickle planted for LoadModel's options lies, and the marker its unpickling would write.
PLANTED = Path(tempfile.gettempdir()) / f"ur-fuzz-planted-{os.getpid()}"
PAYLOAD, MARKER = PLANTED / "head.joblib", PLANTED / "marker"


def _option_names() -> list[str]:
    return sorted({name for cls in registered_backends().values() for name in cls.options_model.model_fields})


def _hostile_options() -> st.SearchStrategy[struct_pb2.Struct]:
    """LoadModel options as a hostile client sends them: real option names, values no caller may set.

    Random keys never name an option, so a fuzz of random Structs stopped at "unknown option":
    these name every backend's options, with a planted pickle's path (absolute, ``../``), a
    folder, non-finite and huge numbers. Every such case must be refused; none may load anything.
    (Each option of each catalog backend is tried with the pickle's path, one by one, in
    ``tests/service/model_manager/test_load_override_policy.py``: a few drawn cases rarely name the one option that reads a file.)
    """
    values = st.sampled_from(
        [
            str(PAYLOAD),
            f"../../../../../../..{PAYLOAD}",
            "/etc",
            "~/.ssh",
            math.nan,
            math.inf,
            -math.inf,
            1e15,
            1e5,
        ]
    )
    entries = st.dictionaries(
        st.sampled_from(_option_names()),
        values | st.dictionaries(st.text(max_size=8), values, max_size=2),
        min_size=1,
        max_size=3,
    )

    def as_struct(options: dict) -> struct_pb2.Struct:
        struct = struct_pb2.Struct()
        struct.update(options)
        return struct

    return entries.map(as_struct)


# Values that keep the cases cheap or the run's state its own; the rest is drawn freely.
OVERRIDES = {
    "universal_runtime.v1.LoadModelRequest.options": _hostile_options(),
    "universal_runtime.v1.WatchModelRequest.options": _hostile_options(),
    "max_tokens": st.integers(min_value=-2, max_value=8),
    "n": st.integers(min_value=-1, max_value=3),
    "universal_runtime.v1.LoadModelRequest.name": st.sampled_from([EMBED, "en-core-web-sm", "rapidocr", "x"]),
    "universal_runtime.v1.UnloadModelRequest.name": st.sampled_from(
        [EMBED, "en-core-web-sm", "rapidocr", "x"]
    ),
    "universal_runtime.v1.WatchModelRequest.name": st.sampled_from(
        [EMBED, "en-core-web-sm", "rapidocr", "x"]
    ),
}


def _page() -> bytes:
    image = Image.new("L", (240, 60), color=255)
    ImageDraw.Draw(image).text((10, 20), "Fuzz page", fill=0)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def _rows(count: int) -> list[a.FeatureRow]:
    return [
        a.FeatureRow(values=[a.FeatureValue(number_value=i % 7), a.FeatureValue(number_value=i % 3 * 0.5)])
        for i in range(count)
    ]


def _stored(response_id: str) -> r.StoredResponse:
    return r.StoredResponse(
        id=response_id, response_json=b'{"object": "response"}', input_items_json=b'[{"type": "message"}]'
    )


_CHAT_MESSAGES = [g.ChatMessage(role=g.CHAT_ROLE_USER, content="Say hi.")]
_PARAMETERS = g.GenerationParameters(max_tokens=4, temperature=0.0)

#: One request per RPC that the server accepts (a list for client-streaming RPCs).
SEEDS = {
    "Generate": [g.GenerateRequest(model=CHAT, messages=_CHAT_MESSAGES, parameters=_PARAMETERS)],
    "GenerateStream": [g.GenerateStreamRequest(model=CHAT, prompt="Hello", parameters=_PARAMETERS)],
    "Embed": [e.EmbedRequest(model=EMBED, inputs=["a first text", "a second one"])],
    "Classify": [
        e.ClassifyRequest(model=EMBED, inputs=["I love it"], candidate_labels=["positive", "negative"])
    ],
    "ExtractEntities": [
        e.ExtractEntitiesRequest(model="en-core-web-sm", inputs=["Ada Lovelace lived in London."])
    ],
    "Rerank": [
        e.RerankRequest(model=EMBED, query="a cat", documents=["a dog", "a kitten", "a car"], top_n=2)
    ],
    "FitClassifier": [
        e.FitClassifierRequest(
            name=CLASSIFIER,
            embedding_model=EMBED,
            overwrite=True,
            examples=[e.ClassifierExample(text=t, label=lab) for t, lab in [("good", "p"), ("bad", "n")] * 2],
        )
    ],
    "ListClassifiers": [e.ListClassifiersRequest()],
    "DeleteClassifier": [e.DeleteClassifierRequest(name=f"{CLASSIFIER}-other")],
    "Ocr": [
        ocr_pb2.OcrRequest(options=ocr_pb2.OcrOptions(model="rapidocr", mime_type="image/png"), chunk=_page())
    ],
    "AnalyzeDocument": [
        d.AnalyzeDocumentRequest(options=d.AnalyzeDocumentOptions(return_lines=True), chunk=_page())
    ],
    "AskDocument": [
        d.AskDocumentRequest(
            options=d.AskDocumentOptions(question="What does the page say?", max_tokens=4), chunk=_page()
        )
    ],
    "ExtractDocument": [
        d.ExtractDocumentRequest(
            options=d.ExtractDocumentOptions(
                json_schema='{"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}',
                max_tokens=16,
            ),
            chunk=_page(),
        )
    ],
    "ClassifyDocument": [
        d.ClassifyDocumentRequest(
            options=d.ClassifyDocumentOptions(candidate_labels=["letter", "invoice"]), chunk=_page()
        )
    ],
    "FitAnomalyDetector": [a.FitAnomalyDetectorRequest(detector=DETECTOR, rows=_rows(32))],
    "DetectAnomaly": [a.DetectAnomalyRequest(detector=DETECTOR, rows=_rows(4))],
    "StreamDetectAnomaly": [
        a.StreamDetectAnomalyRequest(
            config=a.StreamDetectorConfig(window_size=32, min_samples=10), rows=_rows(8)
        ),
        a.StreamDetectAnomalyRequest(rows=_rows(8)),
    ],
    "ListAnomalyDetectors": [a.ListAnomalyDetectorsRequest()],
    "DeleteAnomalyDetector": [a.DeleteAnomalyDetectorRequest(detector=f"{DETECTOR}-other")],
    "Tokenize": [
        t.TokenizeRequest(model=CHAT, messages=_CHAT_MESSAGES, return_token_strings=True, return_offsets=True)
    ],
    "Detokenize": [t.DetokenizeRequest(model=EMBED, token_ids=[101, 1037, 4937, 102])],
    "Transcribe": [
        speech_pb2.TranscribeRequest(
            options=speech_pb2.TranscribeOptions(model="pocketsphinx-en-us", word_timestamps=True),
            chunk=spoken_wav("open the door please"),
        )
    ],
    "SynthesizeSpeech": [
        speech_pb2.SynthesizeSpeechRequest(
            model="espeak-ng", input="Say hi.", voice="en-us", response_format=speech_pb2.AUDIO_FORMAT_WAV
        )
    ],
    "ListVoices": [speech_pb2.ListVoicesRequest(model="espeak-ng")],
    # No image model ships in the default catalog: the user catalog adds a tiny one (own_channel).
    "GenerateImage": [
        images_pb2.GenerateImageRequest(model=IMAGE, prompt="a cat", width=64, height=64, steps=2)
    ],
    "ListModels": [m.ListModelsRequest()],
    "GetModel": [m.GetModelRequest(name=EMBED)],
    "LoadModel": [m.LoadModelRequest(name=EMBED, keep_alive="5m")],
    "UnloadModel": [m.UnloadModelRequest(name="rapidocr")],
    "WatchModel": [m.WatchModelRequest(name=EMBED, load=True, keep_alive="5m")],
    "PutStoredResponse": [r.PutStoredResponseRequest(response=_stored("resp_fuzzseedput"))],
    "GetStoredResponse": [r.GetStoredResponseRequest(id="resp_fuzzseedget")],
    "DeleteStoredResponse": [r.DeleteStoredResponseRequest(id="resp_fuzzseeddelete")],
    # Not stored, so that the seed may run again; a mutation to store=true stores (or finds the id taken).
    "CreateResponse": [
        r.CreateResponseRequest(
            generate=g.GenerateRequest(model=CHAT, messages=_CHAT_MESSAGES, parameters=_PARAMETERS),
            response=r.NewResponse(id="resp_fuzzseedcreate", header_json=b"{}", input_items_json=b"[]"),
        )
    ],
    "CreateResponseStream": [
        r.CreateResponseStreamRequest(
            generate=g.GenerateStreamRequest(model=CHAT, messages=_CHAT_MESSAGES, parameters=_PARAMETERS),
            response=r.NewResponse(id="resp_fuzzseedstream", header_json=b"{}", input_items_json=b"[]"),
        )
    ],
}

SERVICES = [
    inference_service_pb2.DESCRIPTOR.services_by_name["InferenceService"],
    model_service_pb2.DESCRIPTOR.services_by_name["ModelService"],
    response_store_pb2.DESCRIPTOR.services_by_name["ResponseStoreService"],
]
METHODS = [method for service in SERVICES for method in service.methods]


def test_every_rpc_has_a_seed():
    assert {method.name for method in METHODS} == set(SEEDS)


class _Planted:
    """Unpickling this writes :data:`MARKER`: proof that a load ran a client-named pickle."""

    def __reduce__(self):
        return (Path.write_text, (MARKER, "pwned"))


@pytest.fixture(scope="module")
def planted():
    """The pickle :func:`_hostile_options` names, planted for this module's run."""
    PLANTED.mkdir(exist_ok=True)
    PAYLOAD.write_bytes(pickle.dumps(_Planted()))
    yield
    shutil.rmtree(PLANTED, ignore_errors=True)


@pytest.fixture(scope="module")
async def own_channel(tmp_path_factory):
    """A channel to a server of this module's own: default catalog, own data folder.

    The data folder's user catalog adds a tiny image model (random weights) built here.
    """
    data_dir = tmp_path_factory.mktemp("mutations")
    pipeline = build_tiny_pipeline(tmp_path_factory.mktemp("mutations-image") / IMAGE)
    entry = {"tasks": ["generate_image"], "backend": "diffusers", "source": str(pipeline)}
    (data_dir / "catalog.yaml").write_text(yaml.safe_dump({"models": {IMAGE: entry}}))
    settings = Settings(grpc_port=0, catalog_path=None, data_dir=data_dir)
    server = await start_server(settings)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        yield channel
    await server.stop(grace=1.0)


@pytest.fixture(scope="module")
async def seeded(own_channel):
    """The seeds' state made, and every seed checked to be accepted."""
    inference = inference_service_pb2_grpc.InferenceServiceStub(own_channel)
    # What the seeds read and delete exists (a mutated delete then meets NOT_FOUND, a clear answer).
    await inference.FitAnomalyDetector(SEEDS["FitAnomalyDetector"][0], timeout=60)
    for fit, name_field, name in [
        (SEEDS["FitAnomalyDetector"][0], "detector", f"{DETECTOR}-other"),
        (SEEDS["FitClassifier"][0], "name", f"{CLASSIFIER}-other"),
    ]:
        request = type(fit)()
        request.CopyFrom(fit)
        setattr(request, name_field, name)
        method = inference.FitAnomalyDetector if name_field == "detector" else inference.FitClassifier
        await method(request, timeout=60)
    # What the stored-response seeds read and delete exists too.
    responses = response_store_pb2_grpc.ResponseStoreServiceStub(own_channel)
    for response_id in ("resp_fuzzseedget", "resp_fuzzseeddelete"):
        await responses.PutStoredResponse(r.PutStoredResponseRequest(response=_stored(response_id)))
    for method in METHODS:
        code, details = await invoke(own_channel, method, SEEDS[method.name])
        assert code is grpc.StatusCode.OK, f"the {method.name} seed is refused: {code.name} {details}"
    return own_channel


def mutated(method) -> st.SearchStrategy[list]:
    """The RPC's seed with one message changed in one field."""
    seed = SEEDS[method.name]
    index = st.integers(min_value=0, max_value=len(seed) - 1)
    return index.flatmap(
        lambda i: mutations(seed[i], OVERRIDES).map(lambda changed: [*seed[:i], changed, *seed[i + 1 :]])
    )


@pytest.mark.parametrize("method", METHODS, ids=lambda method: method.name)
async def test_rpc_survives_mutated_valid_requests(seeded, planted, method):
    await fuzz_rpc(seeded, method, mutated(method))
    await assert_healthy(inference_service_pb2_grpc.InferenceServiceStub(seeded))
    assert not MARKER.exists(), f"{method.name} unpickled the planted file"
