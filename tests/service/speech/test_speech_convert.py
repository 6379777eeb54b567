"""Speech messages: what the converters refuse, and the backend hop's inverses (service.model_manager.backends.speech_wire).

Refusals: every bad field of a Transcribe or SynthesizeSpeech request is INVALID_ARGUMENT naming it
(INPUT_TOO_LONG for text over its bound), before any model is touched. Round trips: what the
server's converter makes of a request, sent to a backend by the proxy and read back there with
the same converter, is unchanged; the backend's answers, read back by the proxy, are the engine's
results they were made from. Every message crosses as bytes.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from universal_runtime.v1 import speech_pb2 as pb

from engines.errors import InputTooLongError, InvalidArgumentError
from engines.speech.types import (
    AudioFormat,
    SpeechAudio,
    SpeechOptions,
    TranscriptionInfo,
    TranscriptionOptions,
    TranscriptionTask,
    TranscriptSegment,
    TranscriptWord,
    Voice,
)
from service.convert import speech
from service.model_manager.backends import speech_wire
from service.settings import Settings

SETTINGS = Settings(audio_max_bytes=1000, audio_max_seconds=5.0, speech_max_input_chars=50)


def _crossed(message):
    return type(message).FromString(message.SerializeToString())


@pytest.mark.parametrize(
    ("options", "field"),
    [
        (pb.TranscribeOptions(language="english"), "options.language"),
        (pb.TranscribeOptions(language="e"), "options.language"),
        (pb.TranscribeOptions(language="en us x"), "options.language"),
        (pb.TranscribeOptions(temperature=1.5), "options.temperature"),
        (pb.TranscribeOptions(temperature=-0.1), "options.temperature"),
    ],
)
def test_bad_transcribe_options_name_their_field(options, field):
    with pytest.raises(InvalidArgumentError) as caught:
        speech.transcription_job(options, SETTINGS)
    assert caught.value.metadata["field"] == field


def test_a_prompt_over_its_bound_is_input_too_long():
    with pytest.raises(InputTooLongError) as caught:
        speech.transcription_job(pb.TranscribeOptions(prompt="x" * (speech.MAX_PROMPT_CHARS + 1)), SETTINGS)
    assert caught.value.metadata["field"] == "options.prompt"


def test_transcribe_options_take_the_defaults_and_limits_of_the_settings():
    job = speech.transcription_job(pb.TranscribeOptions(language="pt_BR", translate=True), SETTINGS)
    assert job.model == SETTINGS.transcribe_default_model
    assert job.options.language == "pt"
    assert job.options.task is TranscriptionTask.TRANSLATE
    assert (job.limits.max_bytes, job.limits.max_seconds) == (1000, 5.0)
    assert speech.transcription_job(pb.TranscribeOptions(), SETTINGS).options.language is None


@pytest.mark.parametrize(
    ("request_fields", "field"),
    [
        ({"input": ""}, "input"),
        ({"input": "   "}, "input"),
        ({"input": "hi", "speed": 0.1}, "speed"),
        ({"input": "hi", "speed": 4.5}, "speed"),
        ({"input": "hi", "response_format": 99}, "response_format"),
        ({"input": "hi", "voice": "v" * (speech.MAX_VOICE_CHARS + 1)}, "voice"),
        ({"input": "hi", "instructions": "i" * (speech.MAX_INSTRUCTIONS_CHARS + 1)}, "instructions"),
    ],
)
def test_bad_speech_requests_name_their_field(request_fields, field):
    with pytest.raises(InvalidArgumentError) as caught:
        speech.speech_job(pb.SynthesizeSpeechRequest(**request_fields), SETTINGS)
    assert caught.value.metadata["field"] == field


def test_input_over_the_setting_is_input_too_long():
    with pytest.raises(InputTooLongError) as caught:
        speech.speech_job(pb.SynthesizeSpeechRequest(input="a" * 51), SETTINGS)
    assert caught.value.metadata["max_chars"] == "50"


def test_speech_defaults_are_mp3_at_normal_speed_on_the_default_model():
    job = speech.speech_job(pb.SynthesizeSpeechRequest(input="Hello."), SETTINGS)
    assert (job.model, job.audio_format, job.options.speed) == (
        SETTINGS.speech_default_model,
        AudioFormat.MP3,
        1.0,
    )


def test_every_audio_format_has_its_wire_value():
    assert set(speech.AUDIO_FORMATS.values()) == set(AudioFormat)


_words = st.builds(
    TranscriptWord,
    word=st.text(max_size=8),
    start_s=st.floats(0, 1e4, allow_nan=False),
    end_s=st.floats(0, 1e4, allow_nan=False),
    probability=st.floats(0, 1, width=32),
)
_segments = st.builds(
    TranscriptSegment,
    id=st.integers(0, 2**31 - 1),
    start_s=st.floats(0, 1e4, allow_nan=False),
    end_s=st.floats(0, 1e4, allow_nan=False),
    text=st.text(max_size=40),
    words=st.lists(_words, max_size=3).map(tuple),
    avg_logprob=st.floats(-100, 0, width=32),
    no_speech_prob=st.floats(0, 1, width=32),
)
_infos = st.builds(
    TranscriptionInfo, language=st.sampled_from(["en", "de", "zh"]), duration_s=st.floats(0, 1e4)
)


@given(st.one_of(_segments, _infos))
def test_transcription_events_cross_the_hop_unchanged(event):
    assert speech_wire.transcription_event(_crossed(speech.transcribe_response(event))) == event


@given(
    language=st.sampled_from([None, "en", "de"]),
    prompt=st.text(max_size=30),
    temperature=st.floats(0, 1, width=32),
    task=st.sampled_from(TranscriptionTask),
    words=st.booleans(),
    size=st.integers(0, 3 * speech_wire.CHUNK_BYTES // 2),
)
def test_transcribe_requests_cross_the_hop_unchanged(language, prompt, temperature, task, words, size):
    options = TranscriptionOptions(
        language=language, prompt=prompt, temperature=temperature, task=task, word_timestamps=words
    )
    data = bytes(range(256)) * (size // 256)
    messages = [_crossed(m) for m in speech_wire.transcribe_messages("stt", data, options)]
    job = speech.transcription_job(messages[0].options, SETTINGS)
    assert job.model == "stt" and job.options == options
    assert b"".join(m.chunk for m in messages) == data
    assert all(len(m.chunk) <= speech_wire.CHUNK_BYTES for m in messages)


@pytest.mark.parametrize("audio_format", list(AudioFormat))
def test_speech_requests_cross_the_hop_unchanged(audio_format):
    options = SpeechOptions(voice="en-gb", speed=1.5, instructions="calm")
    message = _crossed(speech_wire.speech_request("tts", "Hello there.", options, audio_format))
    job = speech.speech_job(message, SETTINGS)
    assert (job.model, job.text, job.options, job.audio_format) == (
        "tts",
        "Hello there.",
        options,
        audio_format,
    )


def test_speech_answers_give_rate_and_type_on_the_first_piece_only():
    first = speech.speech_response(SpeechAudio(b"ab", 22050), AudioFormat.WAV, True)
    later = speech.speech_response(SpeechAudio(b"cd", 22050), AudioFormat.WAV, False)
    assert (first.audio, first.sample_rate, first.mime_type) == (b"ab", 22050, "audio/wav")
    assert (later.audio, later.sample_rate, later.mime_type) == (b"cd", 0, "")


def test_voices_cross_the_hop_in_order():
    voices = (Voice("en-us", "English (America)", "en-us", "male"), Voice("de", "German", "de"))
    assert speech_wire.voices(_crossed(speech.voices_response(voices))) == voices
