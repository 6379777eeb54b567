"""Embed's quantized encodings agree with sentence-transformers' ``quantize_embeddings`` (real MiniLM)."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
from sentence_transformers import quantize_embeddings
from universal_runtime.v1 import encoders_pb2 as e

from engines.embedding.quantization import CALIBRATION_TEXTS
from tests.conftest import EMBED_MODEL, error_info

SENTENCES = [
    "The cat sat on the mat.",
    "Quarterly revenue grew by twelve percent.",
    "How do I reset my password?",
]
DTYPES = {
    e.EMBEDDING_ENCODING_INT8: np.int8,
    e.EMBEDDING_ENCODING_UINT8: np.uint8,
    e.EMBEDDING_ENCODING_BINARY: np.int8,
    e.EMBEDDING_ENCODING_UBINARY: np.uint8,
}
PRECISIONS = {
    e.EMBEDDING_ENCODING_INT8: "int8",
    e.EMBEDDING_ENCODING_UINT8: "uint8",
    e.EMBEDDING_ENCODING_BINARY: "binary",
    e.EMBEDDING_ENCODING_UBINARY: "ubinary",
}
CALIBRATION: dict[int, np.ndarray] = {}


async def float_vectors(inference, inputs, **kwargs) -> np.ndarray:
    response = await inference.Embed(e.EmbedRequest(model=EMBED_MODEL, inputs=inputs, **kwargs))
    return np.array([list(x.values) for x in response.embeddings], dtype=np.float32)


async def quantized(inference, inputs, encoding, **kwargs) -> tuple[np.ndarray, e.EmbedResponse]:
    response = await inference.Embed(
        e.EmbedRequest(model=EMBED_MODEL, inputs=inputs, encoding=encoding, **kwargs)
    )
    assert response.encoding == encoding
    assert all(not item.values for item in response.embeddings)
    rows = [np.frombuffer(item.packed_values, dtype=DTYPES[encoding]) for item in response.embeddings]
    return np.stack(rows), response


@pytest.mark.parametrize("encoding", list(PRECISIONS), ids=list(PRECISIONS.values()))
@pytest.mark.parametrize("dimensions", [0, 100])
async def test_encodings_agree_with_quantize_embeddings(inference, encoding, dimensions):
    options = {"normalize": True, "dimensions": dimensions}
    values, response = await quantized(inference, SENTENCES, encoding, **options)
    width = dimensions or 384
    assert response.dimensions == width
    packed = encoding in (e.EMBEDDING_ENCODING_BINARY, e.EMBEDDING_ENCODING_UBINARY)
    assert values.shape == (len(SENTENCES), -(-width // 8) if packed else width)
    vectors = await float_vectors(inference, SENTENCES, **options)
    if dimensions not in CALIBRATION:  # embedded once per setting: 120 texts
        CALIBRATION[dimensions] = await float_vectors(inference, list(CALIBRATION_TEXTS), **options)
    calibration = CALIBRATION[dimensions]
    expected = quantize_embeddings(vectors, PRECISIONS[encoding], calibration_embeddings=calibration)
    assert expected.dtype == values.dtype
    # The same vectors computed in other batches may differ in their last bits: a value on a step's
    # edge may fall one step lower or higher (or a sign bit of a value at zero may flip).
    differences = np.abs(expected.astype(np.int32) - values.astype(np.int32))
    assert (differences == 0).mean() > 0.98
    if not packed:
        assert differences.max() <= 1


async def test_a_single_input_is_quantized_with_the_calibrated_ranges(inference):
    alone, _ = await quantized(inference, SENTENCES[:1], e.EMBEDDING_ENCODING_INT8, normalize=True)
    together, _ = await quantized(inference, SENTENCES, e.EMBEDDING_ENCODING_INT8, normalize=True)
    # Ranges do not depend on the request's other inputs.
    assert np.abs(alone[0].astype(np.int32) - together[0].astype(np.int32)).max() <= 1


async def test_binary_bits_are_the_signs(inference):
    values, _ = await quantized(inference, SENTENCES, e.EMBEDDING_ENCODING_UBINARY)
    vectors = await float_vectors(inference, SENTENCES)
    bits = np.unpackbits(values, axis=1)
    assert (bits == (vectors > 0)).mean() > 0.99


async def test_unspecified_encoding_keeps_float_values(inference):
    response = await inference.Embed(e.EmbedRequest(model=EMBED_MODEL, inputs=SENTENCES[:1]))
    assert response.encoding == e.EMBEDDING_ENCODING_FLOAT
    assert len(response.embeddings[0].values) == 384 and not response.embeddings[0].packed_values


async def test_unknown_encoding_is_invalid_argument(inference):
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await inference.Embed(e.EmbedRequest(model=EMBED_MODEL, inputs=["x"], encoding=99))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(caught.value).metadata["field"] == "encoding"
