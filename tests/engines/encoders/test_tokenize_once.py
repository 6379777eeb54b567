"""Tokenize once: the batcher's token ids are the model's inputs, on every runtime.

The engines' batches run the ids :class:`~engines.batching.tokens.TokenCounter` made when it counted
the inputs (no second tokenization in ``SentenceTransformer.encode`` or ``CrossEncoder.predict``).
Checked against the libraries' own calls on the same loaded model: the vectors of all-MiniLM-L6-v2
under torch, ONNX Runtime and OpenVINO (bitwise for a batch of the same inputs, cosine >= 0.9999
through the batcher, whose length groups pad differently), ``START``/``END`` truncation on ids against the
tokenizer's own truncation, and cross-encoder scores and classifier probabilities against the
libraries' calls. Engines are built in-process (no server): one ONNX export in a temporary cache,
from which the OpenVINO copy is derived.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from transformers import AutoTokenizer

from engines.base import ModelSpec
from engines.batching.tokens import TokenCounter, TokenIds
from engines.classification.transformers_engine import TransformersClassificationEngine
from engines.embedding.sentence_transformers_engine import SentenceTransformersEmbeddingEngine
from engines.encoder_types import ClassificationRequest, RerankRequest
from engines.executor import DeviceExecutor
from engines.types import EmbeddingRequest, Task, Truncation
from tests.conftest import MINILM_SOURCE
from tests.engines.encoders.conftest import minilm_dir
from tests.engines.encoders.test_rerank import DOCUMENTS, QUERY

RUNTIMES = ["torch", "onnx", "openvino"]
LONG = " ".join(
    f"word{i} of a rather long text about nothing in particular" for i in range(60)
)  # > 256 tokens
TEXTS = [
    "Hi.",
    "The striker scored twice in the second half.",
    "Paris is the capital and largest city of France, on the Seine.",
    "Ünïcödé tèxt — with accents, emoji 🙂 and CJK 東京.",
    LONG,
    "How do I reset my password?",
]


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return np.sum(a * b, axis=1)


def spec(name: str, backend: str, task: Task, source: str, **options) -> ModelSpec:
    return ModelSpec(name=name, backend=backend, tasks=(task,), source=source, options=options)


@pytest.fixture(scope="module")
def executor():
    ex = DeviceExecutor("cpu-tokenize-once")
    yield ex
    ex.shutdown()


@pytest.fixture(scope="module")
def embedders(tmp_path_factory, executor):
    cache = str(tmp_path_factory.mktemp("converted"))
    engines = {}
    for runtime in RUNTIMES:
        options = {"runtime": runtime, "cache_dir": cache}
        engine = SentenceTransformersEmbeddingEngine(
            spec(f"minilm-{runtime}", "sentence_transformers", Task.EMBED, MINILM_SOURCE, **options),
            "cpu",
            executor,
        )
        engine.load()
        engines[runtime] = engine
    yield engines
    for engine in engines.values():
        engine.unload()


def library_vectors(engine, texts: list[str], truncation_side: str = "right") -> np.ndarray:
    """``SentenceTransformer.encode`` on the engine's own model (its runtime swapped in), one batch."""
    tokenizer = engine.model.tokenizer
    side, tokenizer.truncation_side = tokenizer.truncation_side, truncation_side
    try:
        return engine.model.encode(
            texts, batch_size=len(texts), convert_to_numpy=True, show_progress_bar=False
        )
    finally:
        tokenizer.truncation_side = side


@pytest.mark.parametrize("runtime", RUNTIMES)
async def test_vectors_equal_the_librarys_encode(embedders, runtime):
    engine = embedders[runtime]
    want = library_vectors(engine, TEXTS)
    # One batch of the same inputs: the same padded arrays reach the runtime, so the same numbers
    # (the library's rows are in another order, which these runtimes' kernels do not depend on).
    same_batch = np.stack(engine._encode_batch(engine.tokens.encode(TEXTS, Truncation.END)))
    np.testing.assert_array_equal(same_batch, want)
    # Through the batcher (length groups: other paddings), as served.
    served, used = await engine.encode(list(TEXTS))
    assert cosines(served, want).min() >= 0.9999, cosines(served, want)
    assert used == sum(len(ids) for ids in engine.tokens.encode(TEXTS, Truncation.END))


@pytest.mark.parametrize("runtime", RUNTIMES)
async def test_start_truncation_keeps_the_last_tokens_like_the_library(embedders, runtime):
    engine = embedders[runtime]
    texts = [LONG, LONG + " and the very end", "short"]
    want = library_vectors(engine, texts, truncation_side="left")
    got, used = await engine.encode(texts, Truncation.START)
    assert cosines(got, want).min() >= 0.9999
    assert used == 2 * engine.max_seq_length + len(engine.tokens.encode(["short"], Truncation.END)[0])
    # END keeps the first tokens instead: the two long texts then embed alike, here not.
    assert cosines(got[:1], got[1:2])[0] < 0.9999


async def test_a_default_prompt_left_out_of_pooling_stays_out(tmp_path, executor):
    """A model whose default prompt is prefixed to every text and excluded from its mean pooling."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(minilm_dir()), device="cpu")
    model.prompts, model.default_prompt_name = {"query": "query: a question about "}, "query"
    model[1].include_prompt = False
    model.save(str(tmp_path))
    engine = SentenceTransformersEmbeddingEngine(
        spec("prompted", "sentence_transformers", Task.EMBED, str(tmp_path)), "cpu", executor
    )
    engine.load()
    try:
        assert engine.model[1].include_prompt is False and engine._prompt_length
        got, _ = await engine.encode(list(TEXTS))
        want = library_vectors(engine, TEXTS)
        assert cosines(got, want).min() >= 0.9999
        # Pooled over the prompt too, the vectors would differ.
        assert cosines(got, library_vectors_with_prompt_pooled(engine)).min() < 0.9999
    finally:
        engine.unload()


def library_vectors_with_prompt_pooled(engine) -> np.ndarray:
    engine.model[1].include_prompt = True
    try:
        return library_vectors(engine, TEXTS)
    finally:
        engine.model[1].include_prompt = False


async def test_nothing_a_client_sends_reaches_the_runtime_untokenized(embedders, monkeypatch):
    engine = embedders["torch"]

    def refuse(*args, **kwargs):
        raise AssertionError("the library tokenized a text a second time")

    # The model's own tokenization paths (SentenceTransformer.preprocess / tokenize, the tokenizer).
    monkeypatch.setattr(engine.model, "preprocess", refuse)
    monkeypatch.setattr(engine.model, "tokenize", refuse)
    monkeypatch.setattr(type(engine.model.tokenizer), "__call__", refuse)
    seen: list = []
    run = engine.batcher._run_batch

    def spy(items):
        seen.extend(items)
        return run(items)

    monkeypatch.setattr(engine.batcher, "_run_batch", spy)
    result = await engine.embed(EmbeddingRequest(inputs=["a first text", "and a second one"]))
    assert result.vectors.shape == (2, 384)
    assert seen and all(isinstance(item, TokenIds) for item in seen)


@pytest.fixture(scope="module")
def counter() -> tuple[TokenCounter, object]:
    tokenizer = AutoTokenizer.from_pretrained(str(minilm_dir()))
    return TokenCounter(tokenizer, 12, "minilm"), tokenizer


def random_texts(seed: int, count: int) -> list[str]:
    words = ["the", "cat", "sat", "on", "a", "mat", "unbelievably", "naïve", "東京", "🙂", "x-ray", "42", "."]
    rng = random.Random(seed)
    return [" ".join(rng.choice(words) for _ in range(rng.randint(0, 20))) for _ in range(count)]


@pytest.mark.parametrize("path", ["rust", "wrapper"])
@pytest.mark.parametrize("side", ["right", "left"])
def test_truncation_on_ids_matches_the_tokenizers_own(counter, side, path):
    tokens, tokenizer = counter
    if path == "wrapper":  # the path of a slow (Python) tokenizer, which has no Rust tokenizer
        tokens = TokenCounter(tokenizer, 12, "minilm")
        tokens._raw = None
    truncation = Truncation.START if side == "left" else Truncation.END
    texts = random_texts(1, 200)
    queries, documents = random_texts(2, 20), random_texts(3, 20)
    tokenizer.truncation_side = side
    try:
        want = tokenizer(texts, truncation=True, max_length=12)
        got = tokens.encode(texts, truncation)
        assert [t.input_ids for t in got] == want["input_ids"]
        assert [t.token_type_ids for t in got] == want["token_type_ids"]
        for query in queries:  # bounded: 20 queries x 20 documents
            want = tokenizer([query] * len(documents), documents, truncation="longest_first", max_length=12)
            got = tokens.encode_pairs(query, documents, truncation)
            assert [t.input_ids for t in got] == want["input_ids"], query
            assert [t.token_type_ids for t in got] == want["token_type_ids"], query
    finally:
        tokenizer.truncation_side = "right"


def test_collated_arrays_equal_the_tokenizers_padding(counter):
    tokens, tokenizer = counter
    texts = random_texts(4, 16)
    want = tokenizer(texts, truncation=True, max_length=12, padding=True, return_tensors="np")
    got = tokens.padding.collate(tokens.encode(texts, Truncation.END))
    assert sorted(got) == sorted(want.keys())
    for name, array in got.items():
        np.testing.assert_array_equal(array, want[name])


async def test_cross_encoder_scores_equal_the_librarys_predict(cross_encoder_dir, executor):
    from engines.rerank.cross_encoder_engine import CrossEncoderRerankEngine

    engine = CrossEncoderRerankEngine(
        spec("ce", "cross_encoder", Task.RERANK, str(cross_encoder_dir)), "cpu", executor
    )
    engine.load()
    try:
        documents = [*DOCUMENTS, LONG]
        result = await engine.rerank(RerankRequest(query=QUERY, documents=documents))
        got = np.array([r.relevance_score for r in sorted(result.results, key=lambda r: r.index)])
        want = engine.model.predict(
            [(QUERY, d) for d in documents], batch_size=len(documents), show_progress_bar=False
        )
        np.testing.assert_allclose(got, np.asarray(want, dtype=np.float64), rtol=0, atol=1e-6)
    finally:
        engine.unload()


async def test_rerank_truncation_start_equals_the_librarys_left_truncation(cross_encoder_dir, executor):
    # START on a pair is the tokenizer's longest_first from the left (text-embeddings-inference's
    # truncation_direction Left): the long document loses its beginning, the short query stays whole.
    from engines.rerank.cross_encoder_engine import CrossEncoderRerankEngine

    engine = CrossEncoderRerankEngine(
        spec("ce", "cross_encoder", Task.RERANK, str(cross_encoder_dir), max_length=64), "cpu", executor
    )
    engine.load()
    tokenizer = engine.model.tokenizer
    try:
        ending = " The answer: Paris is the capital of France."
        documents = [LONG + ending, ending + " " + LONG, DOCUMENTS[0]]
        result = await engine.rerank(
            RerankRequest(query=QUERY, documents=documents, truncation=Truncation.START)
        )
        got = np.array([r.relevance_score for r in sorted(result.results, key=lambda r: r.index)])
        pairs = [(QUERY, d) for d in documents]
        tokenizer.truncation_side = "left"
        want = engine.model.predict(pairs, batch_size=len(pairs), show_progress_bar=False)
        ids = tokenizer(QUERY, documents[0], truncation="longest_first", max_length=64)["input_ids"]
        tokenizer.truncation_side = "right"
        ends = engine.model.predict(pairs, batch_size=len(pairs), show_progress_bar=False)
        np.testing.assert_allclose(got, np.asarray(want, dtype=np.float64), rtol=0, atol=1e-6)
        assert abs(got[0] - ends[0]) > 1e-4  # START kept another part of the document than END
        assert result.prompt_tokens == 3 * 64 - (64 - len(tokenizer(QUERY, documents[2])["input_ids"]))
        query = tokenizer(QUERY)["input_ids"]
        assert ids[: len(query)] == query  # the query whole, then the document's last tokens
        assert ids[-len(tokenizer(ending)["input_ids"]) + 1 :] == tokenizer(ending)["input_ids"][1:]
    finally:
        tokenizer.truncation_side = "right"
        engine.unload()


async def test_classifier_probabilities_equal_the_models_own_call(text_classifier_dir, executor):
    import torch

    engine = TransformersClassificationEngine(
        spec("tc", "transformers_classifier", Task.CLASSIFY, str(text_classifier_dir)), "cpu", executor
    )
    engine.load()
    try:
        result = await engine.classify(ClassificationRequest(inputs=list(TEXTS), all_scores=True))
        encoded = engine.tokenizer(
            list(TEXTS), padding=True, truncation=True, max_length=engine.max_length, return_tensors="pt"
        )
        with torch.inference_mode():
            want = torch.softmax(engine.model(**encoded)["logits"].float(), dim=-1).numpy()
        for row, classification in enumerate(result.classifications):
            got = {label.label: label.score for label in classification.scores}
            expected = dict(zip(engine.labels, want[row].tolist(), strict=True))
            assert got.keys() == expected.keys()
            np.testing.assert_allclose(
                [got[k] for k in engine.labels], [expected[k] for k in engine.labels], atol=1e-6
            )
    finally:
        engine.unload()
