"""The same answers from models in backend processes as from models in the server's process.

A server with backend processes on, over the session's test catalog, answers the same requests
as the session's server (every model in its own process): greedy generation on both generation
engines (text, token ids, usage, logprobs, a JSON schema's grammar, n choices), embeddings,
reranking, tokenization, transcription, speech and voices, and a Responses chain, whose composite task (read the chain, generate,
store) runs in the server and calls the backend like any engine.
"""

from __future__ import annotations

import json
import uuid

import grpc
import numpy as np
import pytest
from universal_runtime.v1 import encoders_pb2 as e
from universal_runtime.v1 import generation_pb2 as g
from universal_runtime.v1 import (
    inference_service_pb2_grpc,
    model_service_pb2,
    model_service_pb2_grpc,
    response_store_pb2,
    response_store_pb2_grpc,
    speech_pb2,
    tokenization_pb2,
)

from service.server import start_server
from tests import spoken
from tests.conftest import CHAT_MODEL, EMBED_MODEL, HF_CHAT_MODEL, RERANK_MODEL, STT_MODEL, TTS_MODEL

USER = [g.ChatMessage(role=g.CHAT_ROLE_USER, content="Name three colours.")]
GREEDY = g.GenerationParameters(max_tokens=12, temperature=0.0, logprobs=True, top_logprobs=2)
SCHEMA = {
    "type": "object",
    "properties": {"colour": {"type": "string", "enum": ["red", "green", "blue"]}},
    "required": ["colour"],
}


@pytest.fixture(scope="module")
async def backends_channel(settings, tmp_path_factory):
    """A channel to a server like the session's, but with every model in a backend process."""
    running = await start_server(
        settings.model_copy(
            update={
                "backend_processes": True,
                "grpc_port": 0,
                "data_dir": tmp_path_factory.mktemp("backends"),
            }
        )
    )
    async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
        yield channel
    await running.stop(grace=1.0)


async def _both(channel, backends_channel, call):
    """``call(stub)`` on the session's server and on the backends' server: (in process, backends)."""
    here = await call(inference_service_pb2_grpc.InferenceServiceStub(channel))
    there = await call(inference_service_pb2_grpc.InferenceServiceStub(backends_channel))
    return here, there


async def _streamed(stub, request):
    messages = [m async for m in stub.GenerateStream(request)]
    text = "".join(m.text for m in messages)
    ids = [i for m in messages for i in m.token_ids]
    logprobs = [
        (lp.token_id, round(lp.logprob, 3))
        for m in messages
        for entry in m.logprobs
        for lp in [entry.sampled, *entry.top_logprobs]
    ]
    last = messages[-1]
    return text, ids, logprobs, last.finish_reason, last.usage.prompt_tokens, last.usage.completion_tokens


@pytest.mark.parametrize("model", [CHAT_MODEL, HF_CHAT_MODEL])
async def test_greedy_streams_are_the_same(channel, backends_channel, model):
    request = g.GenerateStreamRequest(model=model, messages=USER, parameters=GREEDY)
    here, there = await _both(channel, backends_channel, lambda stub: _streamed(stub, request))
    assert there == here and here[0]


async def test_a_json_schema_grammar_holds_in_a_backend(channel, backends_channel):
    parameters = g.GenerationParameters(max_tokens=24, temperature=0.0)
    parameters.response_format.type = g.RESPONSE_FORMAT_TYPE_JSON_SCHEMA
    parameters.response_format.json_schema = json.dumps(SCHEMA)
    request = g.GenerateRequest(model=CHAT_MODEL, messages=USER, parameters=parameters)
    here, there = await _both(channel, backends_channel, lambda stub: stub.Generate(request))
    assert there.choices[0].text == here.choices[0].text
    assert json.loads(there.choices[0].text)["colour"] in {"red", "green", "blue"}


async def test_seeded_choices_are_the_same(channel, backends_channel):
    parameters = g.GenerationParameters(max_tokens=8, temperature=0.9, seed=7, n=2)
    request = g.GenerateRequest(model=CHAT_MODEL, messages=USER, parameters=parameters)
    here, there = await _both(channel, backends_channel, lambda stub: stub.Generate(request))
    assert [c.text for c in there.choices] == [c.text for c in here.choices]
    assert len(there.choices) == 2


async def test_embeddings_and_rerank_are_the_same(channel, backends_channel):
    texts = ["a cat sat on the mat", "stock markets fell", "kittens are small cats"]
    embed = e.EmbedRequest(model=EMBED_MODEL, inputs=texts)
    here, there = await _both(channel, backends_channel, lambda stub: stub.Embed(embed))
    np.testing.assert_allclose(
        [list(v.values) for v in there.embeddings], [list(v.values) for v in here.embeddings], atol=1e-6
    )
    assert there.usage.prompt_tokens == here.usage.prompt_tokens
    rerank = e.RerankRequest(model=RERANK_MODEL, query="cats", documents=texts)
    here, there = await _both(channel, backends_channel, lambda stub: stub.Rerank(rerank))
    assert [r.index for r in there.results] == [r.index for r in here.results]
    np.testing.assert_allclose(
        [r.relevance_score for r in there.results], [r.relevance_score for r in here.results], atol=1e-6
    )


async def test_tokenize_and_detokenize_are_the_same(channel, backends_channel):
    tokenize = tokenization_pb2.TokenizeRequest(model=CHAT_MODEL, messages=USER, add_generation_prompt=True)
    here, there = await _both(channel, backends_channel, lambda stub: stub.Tokenize(tokenize))
    assert list(there.token_ids) == list(here.token_ids) and here.token_ids
    detokenize = tokenization_pb2.DetokenizeRequest(model=CHAT_MODEL, token_ids=here.token_ids)
    here, there = await _both(channel, backends_channel, lambda stub: stub.Detokenize(detokenize))
    assert there.text == here.text


async def test_bad_input_is_refused_alike(channel, backends_channel):
    request = e.EmbedRequest(model=EMBED_MODEL, inputs=["x" * 10, ""])

    async def refused(stub):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.Embed(request)
        return caught.value.code(), caught.value.details()

    here, there = await _both(channel, backends_channel, refused)
    assert there == here and here[0] == grpc.StatusCode.INVALID_ARGUMENT


async def test_a_responses_chain_is_the_same(channel, backends_channel):
    async def chain(ch) -> list[str]:
        stub = response_store_pb2_grpc.ResponseStoreServiceStub(ch)
        answers, previous = [], ""
        for text in ("My name is Ada.", "What is my name?"):
            request = response_store_pb2.CreateResponseRequest(
                generate=g.GenerateRequest(
                    model=CHAT_MODEL,
                    messages=[g.ChatMessage(role=g.CHAT_ROLE_USER, content=text)],
                    parameters=g.GenerationParameters(max_tokens=12, temperature=0.0),
                ),
                response=response_store_pb2.NewResponse(
                    id=f"resp_{uuid.uuid4().hex}",
                    created_at=1,
                    previous_response_id=previous,
                    store=True,
                    header_json=b"{}",
                    input_items_json=b"[]",
                ),
            )
            created = await stub.CreateResponse(request)
            answers.append(created.answer.choices[0].text)
            previous = request.response.id
        return answers

    here = await chain(channel)
    there = await chain(backends_channel)
    assert there == here and all(here)


async def test_the_backends_are_listed_with_their_processes(backends_channel):
    stub = model_service_pb2_grpc.ModelServiceStub(backends_channel)
    await inference_service_pb2_grpc.InferenceServiceStub(backends_channel).Embed(
        e.EmbedRequest(model=EMBED_MODEL, inputs=["listed"])
    )
    model = (await stub.GetModel(model_service_pb2.GetModelRequest(name=EMBED_MODEL))).model
    assert model.backend_process.pid > 0 and model.backend_process.rss_bytes > 0
    assert model.memory.ram_bytes >= model.backend_process.rss_bytes // 2


async def test_transcriptions_are_the_same(channel, backends_channel):
    data = spoken.spoken_wav(*spoken.SENTENCES, gap_s=1.5)

    async def transcribe(stub):
        options = speech_pb2.TranscribeOptions(model=STT_MODEL, word_timestamps=True)
        messages = [speech_pb2.TranscribeRequest(options=options, chunk=data)]
        return [m async for m in stub.Transcribe(iter(messages))]

    here, there = await _both(channel, backends_channel, transcribe)
    assert there == here and len(here) >= 2 and here[1].segment.words


async def test_speech_and_voices_are_the_same(channel, backends_channel):
    voices = speech_pb2.ListVoicesRequest(model=TTS_MODEL)
    here, there = await _both(channel, backends_channel, lambda stub: stub.ListVoices(voices))
    assert there == here and len(here.voices) > 50
    request = speech_pb2.SynthesizeSpeechRequest(
        model=TTS_MODEL, input="One sentence. And another.", response_format=speech_pb2.AUDIO_FORMAT_PCM
    )

    async def synthesize(stub):
        return [m async for m in stub.SynthesizeSpeech(request)]

    here, there = await _both(channel, backends_channel, synthesize)
    assert (
        (there[0].sample_rate, there[0].mime_type)
        == (here[0].sample_rate, here[0].mime_type)
        == (22050, "audio/pcm")
    )
    # eSpeak NG varies a sentence's length by a few samples from call to call.
    samples_here, samples_there = (sum(len(m.audio) for m in answers) // 2 for answers in (here, there))
    assert samples_there == pytest.approx(samples_here, rel=0.01) and samples_here > 22050
