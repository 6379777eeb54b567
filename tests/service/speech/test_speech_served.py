"""Speech served end to end on the default models: eSpeak NG speaks, PocketSphinx listens.

Over gRPC (Transcribe, SynthesizeSpeech, ListVoices) and through the gateway with the OpenAI SDK
(``audio.transcriptions``, ``audio.translations``, ``audio.speech``), with every kind of bad audio a
client could send answered by a clear 4xx.
"""

from __future__ import annotations

import base64
import json

import grpc
import httpx
import openai
import pytest
from universal_runtime.v1 import generation_pb2 as g
from universal_runtime.v1 import speech_pb2 as pb
from universal_runtime.v1 import tokenization_pb2 as t

from tests import spoken
from tests.conftest import CHAT_MODEL, STT_MODEL, TTS_MODEL, error_info


async def transcribe(inference, data: bytes, **options) -> list[pb.TranscribeResponse]:
    options.setdefault("model", STT_MODEL)
    messages = [pb.TranscribeRequest(options=pb.TranscribeOptions(**options), chunk=data[:65536])]
    messages += [pb.TranscribeRequest(chunk=data[i : i + 65536]) for i in range(65536, len(data), 65536)]
    return [answer async for answer in inference.Transcribe(iter(messages))]


async def synthesize(inference, text: str, **fields) -> list[pb.SynthesizeSpeechResponse]:
    fields.setdefault("model", TTS_MODEL)
    request = pb.SynthesizeSpeechRequest(input=text, **fields)
    return [answer async for answer in inference.SynthesizeSpeech(request)]


# -- gRPC --------------------------------------------------------------------------------------


async def test_transcribe_hears_espeak_with_timed_segments_and_words(inference):
    data = spoken.spoken_wav(*spoken.SENTENCES, gap_s=2.0)
    answers = await transcribe(inference, data, word_timestamps=True)
    info = answers[0].info
    assert answers[0].HasField("info") and info.language == "en"
    assert info.duration_seconds == pytest.approx(spoken.decoded_seconds(data), abs=0.05)
    segments = [a.segment for a in answers[1:]]
    assert len(segments) == 2, "the two sentences are two windows of speech"
    assert [s.id for s in segments] == [0, 1]
    assert (
        0
        <= segments[0].start
        < segments[0].end
        <= segments[1].start
        < segments[1].end
        <= info.duration_seconds
    )
    for sentence, segment in zip(spoken.SENTENCES, segments, strict=True):
        assert spoken.word_error_rate(sentence, segment.text) <= 0.25, segment.text
        assert segment.words and all(
            segment.start - 0.5 <= w.start <= w.end <= segment.end + 0.5 for w in segment.words
        )


@pytest.mark.parametrize(
    ("container", "codec"), [("flac", "flac"), ("mp3", "libmp3lame"), ("ogg", "libopus")]
)
async def test_transcribe_decodes_compressed_audio(inference, container, codec):
    samples = spoken.speech(spoken.SENTENCES[0])
    codec_rate = 48000 if codec == "libopus" else None  # Opus encodes at 48 kHz
    answers = await transcribe(
        inference, spoken.encode(samples, spoken.RATE, container, codec, codec_rate=codec_rate)
    )
    text = " ".join(a.segment.text for a in answers[1:])
    assert spoken.word_error_rate(spoken.SENTENCES[0], text) <= 0.25, text


@pytest.mark.parametrize(
    ("data", "options", "code", "reason"),
    [
        (b"", {}, grpc.StatusCode.INVALID_ARGUMENT, "EMPTY_FILE"),
        (b"\x00\x01garbage" * 100, {}, grpc.StatusCode.INVALID_ARGUMENT, "UNSUPPORTED_FORMAT"),
        (spoken.silent_flac(2)[:60], {}, grpc.StatusCode.INVALID_ARGUMENT, None),
        (spoken.silent_flac(600), {}, grpc.StatusCode.RESOURCE_EXHAUSTED, "AUDIO_TOO_LONG"),
        (
            spoken.spoken_wav("hello"),
            {"language": "de"},
            grpc.StatusCode.INVALID_ARGUMENT,
            "UNSUPPORTED_LANGUAGE",
        ),
        (spoken.spoken_wav("hello"), {"translate": True}, grpc.StatusCode.INVALID_ARGUMENT, None),
        (spoken.spoken_wav("hello"), {"language": "klingon"}, grpc.StatusCode.INVALID_ARGUMENT, None),
        (
            spoken.spoken_wav("hello"),
            {"model": TTS_MODEL},
            grpc.StatusCode.FAILED_PRECONDITION,
            "TASK_NOT_SUPPORTED",
        ),
    ],
    ids=[
        "empty",
        "garbage",
        "truncated",
        "ten-minute-flac",
        "german",
        "translate",
        "bad-language",
        "wrong-model",
    ],
)
async def test_bad_audio_is_refused_with_its_reason(inference, data, options, code, reason):
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await transcribe(inference, data, **options)
    assert caught.value.code() == code, caught.value.details()
    if reason is not None:
        assert error_info(caught.value).reason == reason


async def test_a_header_claiming_hours_is_read_for_what_it_holds(inference):
    answers = await transcribe(inference, spoken.wav_claiming(10 * 3600, actual_s=1.0))
    assert answers[0].info.duration_seconds == pytest.approx(1.0, abs=0.01)
    assert all(not a.segment.text.strip() for a in answers[1:]), "silence has no words"


async def test_audio_over_the_byte_limit_is_refused_while_it_arrives(inference, settings):
    data = b"\x00" * (settings.audio_max_bytes + 1)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await transcribe(inference, data)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert error_info(caught.value).reason == "FILE_TOO_LARGE"


async def test_synthesized_speech_streams_a_sentence_at_a_time(inference):
    text = "First sentence here. Second one follows. And the third."
    answers = await synthesize(inference, text, response_format=pb.AUDIO_FORMAT_WAV)
    assert answers[0].mime_type == "audio/wav" and answers[0].sample_rate == 22050
    assert len([a for a in answers if a.audio]) >= 3
    seconds = spoken.decoded_seconds(b"".join(a.audio for a in answers))
    assert 2.0 < seconds < 12.0


async def test_speech_transcribes_back_to_its_text(inference):
    answers = await synthesize(inference, spoken.SENTENCES[1], response_format=pb.AUDIO_FORMAT_MP3)
    heard = await transcribe(inference, b"".join(a.audio for a in answers))
    text = " ".join(a.segment.text for a in heard[1:])
    assert spoken.word_error_rate(spoken.SENTENCES[1], text) <= 0.25, text


async def test_voices_list_the_default_first_and_speak(inference):
    voices = (await inference.ListVoices(pb.ListVoicesRequest(model=TTS_MODEL))).voices
    assert voices[0].id == "en-us" and len(voices) > 50
    assert {"alloy", "de", "fr-fr"} <= {v.id for v in voices}
    german = await synthesize(inference, "Guten Morgen.", voice="de", response_format=pb.AUDIO_FORMAT_PCM)
    assert german[0].mime_type == "audio/pcm" and len(b"".join(a.audio for a in german)) > 22050


@pytest.mark.parametrize(
    ("fields", "code", "reason"),
    [
        ({"voice": "no-such-voice"}, grpc.StatusCode.INVALID_ARGUMENT, "UNKNOWN_VOICE"),
        ({"speed": 9.0}, grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT"),
        ({"model": STT_MODEL}, grpc.StatusCode.FAILED_PRECONDITION, "TASK_NOT_SUPPORTED"),
        ({"model": "no-such-model"}, grpc.StatusCode.NOT_FOUND, "MODEL_NOT_FOUND"),
    ],
)
async def test_bad_speech_requests_are_refused_before_any_audio(inference, fields, code, reason):
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await synthesize(inference, "Hello.", **fields)
    assert caught.value.code() == code
    assert error_info(caught.value).reason == reason


async def test_text_over_the_limit_is_input_too_long(inference, settings):
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await synthesize(inference, "a" * (settings.speech_max_input_chars + 1))
    assert error_info(caught.value).reason == "INPUT_TOO_LONG"


# -- the gateway, with OpenAI's SDK --------------------------------------------------------------


@pytest.fixture(scope="module")
def openai_client(gateway_url):
    return openai.AsyncOpenAI(base_url=f"{gateway_url}/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def speech_wav():
    return spoken.spoken_wav(*spoken.SENTENCES, gap_s=2.0)


async def test_sdk_transcription_formats(openai_client, speech_wav):
    upload = ("speech.wav", speech_wav, "audio/wav")
    result = await openai_client.audio.transcriptions.create(model=STT_MODEL, file=upload)
    assert spoken.word_error_rate(" ".join(spoken.SENTENCES), result.text) <= 0.25, result.text
    text = await openai_client.audio.transcriptions.create(
        model=STT_MODEL, file=upload, response_format="text"
    )
    assert text.strip() == result.text
    srt = await openai_client.audio.transcriptions.create(model=STT_MODEL, file=upload, response_format="srt")
    assert srt.startswith("1\n00:00:0") and "\n2\n00:00:0" in srt
    vtt = await openai_client.audio.transcriptions.create(model=STT_MODEL, file=upload, response_format="vtt")
    assert vtt.startswith("WEBVTT\n\n00:00:0")
    verbose = await openai_client.audio.transcriptions.create(
        model=STT_MODEL,
        file=upload,
        response_format="verbose_json",
        timestamp_granularities=["word", "segment"],
    )
    assert verbose.language == "english" and verbose.duration == pytest.approx(
        spoken.decoded_seconds(speech_wav), abs=0.05
    )
    assert len(verbose.segments) == 2 and verbose.words
    assert [w.word for w in verbose.words][:3] == spoken.normalized_words(spoken.SENTENCES[0])[:3]


async def test_sdk_transcription_stream(openai_client, speech_wav):
    stream = await openai_client.audio.transcriptions.create(
        model=STT_MODEL, file=("speech.wav", speech_wav, "audio/wav"), stream=True
    )
    events = [event async for event in stream]
    assert [e.type for e in events] == [
        "transcript.text.delta",
        "transcript.text.delta",
        "transcript.text.done",
    ]
    assert events[-1].text == events[0].delta + events[1].delta


async def test_sdk_translation_of_a_model_that_cannot_translate_is_400(openai_client, speech_wav):
    with pytest.raises(openai.BadRequestError):
        await openai_client.audio.translations.create(
            model=STT_MODEL, file=("speech.wav", speech_wav, "audio/wav")
        )


async def test_sdk_speech_streams_to_a_file(openai_client, tmp_path):
    target = tmp_path / "speech.mp3"
    async with openai_client.audio.speech.with_streaming_response.create(
        model=TTS_MODEL, voice="alloy", input="Streaming speech to a file. It comes a sentence at a time."
    ) as response:
        assert response.headers["content-type"] == "audio/mpeg"
        await response.stream_to_file(target)
    assert 1.5 < spoken.decoded_seconds(target.read_bytes()) < 10.0


async def test_speech_as_server_sent_events(gateway_url):
    body = {"model": TTS_MODEL, "input": "One. Two.", "response_format": "pcm", "stream_format": "sse"}
    async with httpx.AsyncClient(base_url=gateway_url, timeout=60) as http:
        response = await http.post("/v1/audio/speech", json=body)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    events = [json.loads(line[5:]) for line in response.text.splitlines() if line.startswith("data:")]
    assert [e["type"] for e in events][-1] == "speech.audio.done"
    assert {e["type"] for e in events[:-1]} == {"speech.audio.delta"} and len(events) >= 3


async def test_voices_route(gateway_url):
    async with httpx.AsyncClient(base_url=gateway_url, timeout=60) as http:
        response = await http.get("/v1/audio/voices", params={"model": TTS_MODEL})
    assert response.status_code == 200
    assert response.json()["data"][0]["id"] == "en-us"


@pytest.mark.parametrize(
    ("request_kwargs", "status", "code"),
    [
        ({"json": {"model": STT_MODEL}}, 400, "invalid_file"),
        ({"data": {"model": STT_MODEL}, "files": {"other": ("x.wav", b"RIFF")}}, 400, "invalid_file"),
        ({"data": {"model": STT_MODEL}, "files": {"file": ("x.mp3", b"")}}, 400, "empty_file"),
        (
            {
                "data": {"model": STT_MODEL},
                "files": {"file": ("x.flac", spoken.silent_flac(2)[:60])},
            },
            400,
            None,
        ),
        (
            {
                "data": {"model": STT_MODEL},
                "files": {"file": ("x.png", b"\x89PNG\r\n\x1a\n" + b"\x00" * 64, "image/png")},
            },
            400,
            "unsupported_format",
        ),
        (
            {"data": {"model": STT_MODEL}, "files": {"file": ("long.flac", spoken.silent_flac(600))}},
            413,
            "audio_too_long",
        ),
        (
            {"data": {"model": STT_MODEL, "temperature": "3"}, "files": {"file": ("x.wav", b"RIFF")}},
            400,
            None,
        ),
        (
            {"data": {"model": STT_MODEL, "response_format": "docx"}, "files": {"file": ("x.wav", b"RIFF")}},
            400,
            None,
        ),
        (
            {"data": {"model": "no-such-model"}, "files": {"file": ("x.wav", spoken.spoken_wav("hi"))}},
            404,
            None,
        ),
    ],
    ids=[
        "json-body",
        "no-file-part",
        "empty",
        "truncated",
        "image",
        "ten-minutes",
        "temperature",
        "format",
        "model",
    ],
)
async def test_bad_transcription_uploads_get_a_clear_4xx(gateway_url, request_kwargs, status, code):
    async with httpx.AsyncClient(base_url=gateway_url, timeout=60) as http:
        response = await http.post("/v1/audio/transcriptions", **request_kwargs)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["message"]
    if code is not None:
        assert error["code"] == code


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"input": ""}, 400),
        ({"input": "hi", "voice": "nobody"}, 400),
        ({"input": "hi", "response_format": "ogg"}, 400),
        ({"input": "hi", "speed": 5}, 400),
        ({"input": "a" * 5000}, 400),
        ({"input": "hi", "model": "no-such-model"}, 404),
    ],
)
async def test_bad_speech_bodies_get_a_clear_4xx(gateway_url, body, status):
    async with httpx.AsyncClient(base_url=gateway_url, timeout=60) as http:
        response = await http.post("/v1/audio/speech", json={"model": TTS_MODEL, **body})
    assert response.status_code == status, response.text
    assert response.json()["error"]["message"]


# -- audio in chat -------------------------------------------------------------------------------


def _chat(content: str = "", parts: list[g.ContentPart] = ()) -> g.GenerateRequest:
    message = g.ChatMessage(role=g.CHAT_ROLE_USER, content=content, content_parts=parts)
    return g.GenerateRequest(
        model=CHAT_MODEL, messages=[message], parameters=g.GenerationParameters(max_tokens=4, temperature=0.0)
    )


async def test_audio_parts_of_a_chat_message_are_heard_as_their_transcript(inference):
    sentence = spoken.SENTENCES[0]
    parts = [
        g.ContentPart(text="Repeat this:"),
        g.ContentPart(audio=g.AudioInput(data=spoken.spoken_wav(sentence))),
    ]
    heard = await inference.Generate(_chat(parts=parts))
    written = await inference.Generate(_chat(content=f"Repeat this:\n{sentence}"))
    assert heard.usage.prompt_tokens == written.usage.prompt_tokens
    assert heard.choices[0].text == written.choices[0].text


@pytest.mark.parametrize(
    ("request_", "code", "reason"),
    [
        (_chat(content="x", parts=[g.ContentPart(text="y")]), grpc.StatusCode.INVALID_ARGUMENT, None),
        (_chat(parts=[g.ContentPart()]), grpc.StatusCode.INVALID_ARGUMENT, None),
        (
            _chat(parts=[g.ContentPart(audio=g.AudioInput(data=b"not audio at all"))]),
            grpc.StatusCode.INVALID_ARGUMENT,
            "UNSUPPORTED_FORMAT",
        ),
        (
            _chat(parts=[g.ContentPart(audio=g.AudioInput(data=spoken.silent_flac(600)))]),
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "AUDIO_TOO_LONG",
        ),
    ],
    ids=["content-and-parts", "empty-part", "garbage-audio", "ten-minutes"],
)
async def test_bad_audio_parts_are_refused(inference, request_, code, reason):
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await inference.Generate(request_)
    assert caught.value.code() == code, caught.value.details()
    if reason is not None:
        assert error_info(caught.value).reason == reason


async def test_other_rpcs_refuse_audio_parts(inference):
    message = g.ChatMessage(
        role=g.CHAT_ROLE_USER,
        content_parts=[g.ContentPart(audio=g.AudioInput(data=spoken.spoken_wav("hello")))],
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await inference.Tokenize(t.TokenizeRequest(model=CHAT_MODEL, messages=[message]))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(caught.value).metadata["field"] == "messages[0].content_parts"


async def test_sdk_chat_with_input_audio(openai_client):
    sentence = spoken.SENTENCES[1]
    audio = base64.b64encode(spoken.spoken_wav(sentence)).decode()
    heard = await openai_client.chat.completions.create(
        model=CHAT_MODEL,
        max_tokens=4,
        temperature=0,
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Repeat this:"},
                    {"type": "input_audio", "input_audio": {"data": audio, "format": "wav"}},
                ],
            }
        ],
    )
    written = await openai_client.chat.completions.create(
        model=CHAT_MODEL,
        max_tokens=4,
        temperature=0,
        messages=[{"role": "user", "content": f"Repeat this:\n{sentence}"}],
    )
    assert heard.usage.prompt_tokens == written.usage.prompt_tokens
    assert heard.choices[0].message.content == written.choices[0].message.content


async def test_chat_with_undecodable_input_audio_is_400(gateway_url):
    part = {
        "type": "input_audio",
        "input_audio": {"data": base64.b64encode(b"nope").decode(), "format": "mp3"},
    }
    body = {"model": CHAT_MODEL, "messages": [{"role": "user", "content": [part]}], "max_tokens": 2}
    async with httpx.AsyncClient(base_url=gateway_url, timeout=60) as http:
        response = await http.post("/v1/chat/completions", json=body)
        bad_base64 = await http.post(
            "/v1/chat/completions",
            json={
                **body,
                "messages": [
                    {"role": "user", "content": [{**part, "input_audio": {"data": "!!", "format": "wav"}}]}
                ],
            },
        )
    assert response.status_code == 400 and response.json()["error"]["code"] == "unsupported_format", (
        response.text
    )
    assert bad_base64.status_code == 400, bad_base64.text
