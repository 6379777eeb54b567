"""The eSpeak NG engine (backend ``espeak``) and the text-to-speech base it stands on.

Real synthesis with the library and voice data the ``espeakng-loader`` wheel ships (milliseconds a
sentence): streamed audio decodes to speech of a plausible length, speed changes it, voices resolve
and unknown ones fail before any work, and the first audio leaves before the last sentence is spoken.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from engines.base import ModelSpec
from engines.capabilities import SpeechSynthesizer
from engines.errors import InvalidArgumentError
from engines.executor import DeviceExecutor
from engines.reasons import Reason
from engines.speech.espeak_engine import OPENAI_VOICES, EspeakEngine
from engines.speech.types import AudioFormat, SpeechAudio, SpeechOptions
from engines.types import Task
from tests.spoken import decode

SOURCE = "pkg://espeakng_loader/espeak-ng-data"
TWO_SENTENCES = "The quick brown fox jumps over the lazy dog. It was a sunny day in the park."


class CountingExecutor(DeviceExecutor):
    """A lane that counts the jobs it ran."""

    def __init__(self) -> None:
        super().__init__("cpu", "espeak-test")
        self.jobs = 0

    async def run(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        self.jobs += 1
        return await super().run(fn, *args, **kwargs)


def make_engine(**options: Any) -> EspeakEngine:
    spec = ModelSpec(
        name="espeak", backend="espeak", tasks=(Task.SYNTHESIZE_SPEECH,), source=SOURCE, options=options
    )
    EspeakEngine.check_spec(spec)
    engine = EspeakEngine(spec, EspeakEngine.select_device(spec.device), CountingExecutor())
    engine.load()
    return engine


@pytest.fixture(scope="module")
def engine() -> Iterator[EspeakEngine]:
    engine = make_engine()
    yield engine
    engine.unload()
    engine.executor.shutdown()


async def synthesize(
    engine: EspeakEngine, text: str, audio_format: AudioFormat, **options: Any
) -> list[bytes]:
    """The pieces' bytes; every piece carries the encoded audio's rate."""
    expected_rate = 48_000 if audio_format is AudioFormat.OPUS else engine.sample_rate
    async with contextlib.aclosing(engine.synthesize(text, SpeechOptions(**options), audio_format)) as pieces:
        audio = [piece async for piece in pieces]
    assert all(isinstance(piece, SpeechAudio) and piece.sample_rate == expected_rate for piece in audio)
    return [piece.data for piece in audio]


def test_is_a_cpu_speech_synthesizer(engine: EspeakEngine) -> None:
    assert isinstance(engine, SpeechSynthesizer)
    assert engine.device == "cpu" and engine.sample_rate == 22050
    assert engine.estimated_load_bytes() > 0


@pytest.mark.parametrize("audio_format", [AudioFormat.WAV, AudioFormat.MP3])
async def test_two_sentences_decode_to_speech(engine: EspeakEngine, audio_format: AudioFormat) -> None:
    samples, rate = decode(b"".join(await synthesize(engine, TWO_SENTENCES, audio_format)))
    assert rate == 22050
    assert 1.0 <= len(samples) / rate <= 12.0  # 0.5-6 s a sentence
    assert float(np.sqrt(np.mean(samples**2))) > 0.01  # not silence


async def test_faster_speech_is_shorter(engine: EspeakEngine) -> None:
    fast = b"".join(await synthesize(engine, TWO_SENTENCES, AudioFormat.PCM, speed=2.0))
    slow = b"".join(await synthesize(engine, TWO_SENTENCES, AudioFormat.PCM, speed=0.5))
    assert len(fast) < 0.6 * len(slow)


async def test_unknown_voice_fails_before_any_work(engine: EspeakEngine) -> None:
    jobs = engine.executor.jobs
    stream = engine.synthesize(TWO_SENTENCES, SpeechOptions(voice="klingon-warrior"), AudioFormat.WAV)
    with pytest.raises(InvalidArgumentError) as caught:
        await anext(stream)
    assert caught.value.reason == Reason.UNKNOWN_VOICE
    assert caught.value.metadata["voice"] == "klingon-warrior"
    assert "en-us" in caught.value.message  # names valid voices
    assert engine.executor.jobs == jobs


@pytest.mark.parametrize("text", ["", "   \n\t "])
async def test_empty_text_is_refused(engine: EspeakEngine, text: str) -> None:
    with pytest.raises(InvalidArgumentError):
        await synthesize(engine, text, AudioFormat.WAV)


@pytest.mark.parametrize("speed", [0.1, 5.0, float("nan")])
async def test_speed_out_of_range_is_refused(engine: EspeakEngine, speed: float) -> None:
    with pytest.raises(InvalidArgumentError):
        await synthesize(engine, "Hello.", AudioFormat.WAV, speed=speed)


async def test_voices_list_the_default_first_then_openai_names(engine: EspeakEngine) -> None:
    voices = await engine.voices()
    ids = [voice.id for voice in voices]
    assert ids[0] == "en-us"
    assert {"en-gb", "de", "fr-fr"} <= set(ids)
    assert set(OPENAI_VOICES) <= set(ids)
    assert len(ids) == len({i.lower() for i in ids})


def test_voices_resolve_by_id_language_and_default(engine: EspeakEngine) -> None:
    assert engine.resolve_voice("").id == "en-us"
    assert engine.resolve_voice("EN-GB").id == "en-gb"
    assert engine.resolve_voice("fr").id == "fr-fr"
    assert engine.resolve_voice("en").id == "en-us"
    assert engine.resolve_voice("de").id == "de"
    assert engine.resolve_voice("nova").gender == "female"


@pytest.mark.parametrize("voice", ["en-gb", "fr", "alloy", "nova", "fable"])
async def test_every_kind_of_voice_speaks(engine: EspeakEngine, voice: str) -> None:
    samples, _ = decode(b"".join(await synthesize(engine, "Good morning.", AudioFormat.WAV, voice=voice)))
    assert float(np.sqrt(np.mean(samples**2))) > 0.01


async def test_openai_voices_sound_different(engine: EspeakEngine) -> None:
    nova = b"".join(await synthesize(engine, "Good morning.", AudioFormat.PCM, voice="nova"))
    onyx = b"".join(await synthesize(engine, "Good morning.", AudioFormat.PCM, voice="onyx"))
    assert nova != onyx


async def test_first_audio_comes_before_the_last_sentence_is_spoken(engine: EspeakEngine) -> None:
    text = "This is the first sentence. Here is the second one. And finally the third."
    jobs = engine.executor.jobs
    chunks = []
    async with contextlib.aclosing(engine.synthesize(text, SpeechOptions(), AudioFormat.PCM)) as stream:
        async for chunk in stream:
            chunks.append((engine.executor.jobs - jobs, chunk.data))
    assert chunks[0][0] == 1  # one sentence spoken when the first bytes came
    assert len(chunks) >= 3  # a piece per sentence
    assert all(data for _, data in chunks)


async def test_closing_early_frees_the_encoder_and_the_lane_goes_on(engine: EspeakEngine) -> None:
    text = "One sentence here. Another sentence there. A third one to skip."
    async with contextlib.aclosing(engine.synthesize(text, SpeechOptions(), AudioFormat.MP3)) as stream:
        first = await anext(stream)
    assert first.data and first.sample_rate == 22050
    chunks = await synthesize(engine, "Still speaking.", AudioFormat.OPUS)
    samples, rate = decode(b"".join(chunks))
    assert rate == 48_000 and len(samples) > 0


async def test_configured_default_voice_is_first() -> None:
    engine = make_engine(default_voice="de", words_per_minute=200)
    try:
        assert (await engine.voices())[0].id == "de"
        assert engine.resolve_voice("").id == "de"
    finally:
        engine.executor.shutdown()


def test_unknown_default_voice_fails_the_load() -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        make_engine(default_voice="nobody")
    assert caught.value.reason == Reason.INVALID_MODEL_OPTION


@pytest.mark.parametrize("options", [{"words_per_minute": 20}, {"words_per_minute": 1000}, {"voice": "x"}])
def test_bad_options_are_refused_by_the_catalog_check(options: dict[str, Any]) -> None:
    spec = ModelSpec(
        name="espeak", backend="espeak", tasks=(Task.SYNTHESIZE_SPEECH,), source=SOURCE, options=options
    )
    with pytest.raises(InvalidArgumentError) as caught:
        EspeakEngine.check_spec(spec)
    assert caught.value.reason == Reason.INVALID_MODEL_OPTION
