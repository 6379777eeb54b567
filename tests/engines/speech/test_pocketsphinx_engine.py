"""The pocketsphinx backend through the SpeechToTextEngine base: eSpeak NG sentences in, text out.

eSpeak's speech is robotic and PocketSphinx's 2015 US English model is weak on it: the word error
rate over :data:`SENTENCES` (83 words, eSpeak NG en-us at 175 words a minute) measured 0.22 to 0.37,
0.30 on average, over 8 runs with the sentences in other orders and 0.3-1 s of silence around them
(eSpeak's output differs slightly from call to call; "the quick brown fox jumps" reads "that tweet
brown fox jumped"). The test asserts at most :data:`MAX_WER`, and exact text only for the sentences
read right in all 8 runs (:data:`READ_RIGHT`).
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from engines.base import ModelSpec
from engines.capabilities import Transcriber
from engines.errors import InvalidArgumentError, ModelLoadError, ResourceExhaustedError
from engines.executor import DeviceExecutor
from engines.reasons import Reason
from engines.registry import engine_class
from engines.speech.pocketsphinx_engine import PocketSphinxEngine, dictionary_word, is_filler
from engines.speech.speech_to_text import place_segment
from engines.speech.types import (
    AudioLimits,
    SpeechWindow,
    TranscriptionInfo,
    TranscriptionOptions,
    TranscriptionTask,
    TranscriptSegment,
    TranscriptWord,
)
from engines.types import Task
from tests.spoken import RATE, silence, speech, spoken_extent, wav, word_errors

SOURCE = "pkg://pocketsphinx/model/en-us"
LIMITS = AudioLimits(max_bytes=10_000_000, max_seconds=120.0)
#: Sentences PocketSphinx read word for word from eSpeak NG in each of 8 runs.
READ_RIGHT = (
    "open the door please",
    "please call me tomorrow morning",
    "i would like a cup of coffee",
    "can you help me find my keys",
    "hello world",
    "i need to buy some bread and milk",
)
SENTENCES = (
    *READ_RIGHT,
    "the quick brown fox jumps over the lazy dog",
    "turn off the lights in the kitchen",
    "the weather is nice today",
    "what time is it",
    "my name is john",
    "thank you very much",
    "where is the nearest train station",
    "the meeting starts at nine o'clock",
    "please send me the report",
)
MAX_WER = 0.45


def spec(**options: object) -> ModelSpec:
    return ModelSpec(
        name="pocketsphinx-en",
        backend="pocketsphinx",
        tasks=(Task.TRANSCRIBE,),
        source=SOURCE,
        options=options,
    )


@pytest.fixture(scope="module")
def engine() -> PocketSphinxEngine:
    pytest.importorskip("pocketsphinx")
    engine = PocketSphinxEngine(spec(), "cpu", DeviceExecutor("cpu"))
    engine.load()
    yield engine
    engine.unload()


async def transcribe(
    engine: PocketSphinxEngine, samples: np.ndarray, options: TranscriptionOptions | None = None
) -> tuple[TranscriptionInfo, list[TranscriptSegment]]:
    stream = engine.transcribe(wav(samples), LIMITS, options or TranscriptionOptions())
    async with contextlib.aclosing(stream):
        events = [event async for event in stream]
    info, segments = events[0], events[1:]
    assert isinstance(info, TranscriptionInfo)
    assert all(isinstance(segment, TranscriptSegment) for segment in segments)
    return info, segments


def padded(text: str) -> np.ndarray:
    return np.concatenate([silence(0.5), speech(text), silence(0.5)])


def test_registered_and_a_transcriber(engine: PocketSphinxEngine) -> None:
    assert engine_class("pocketsphinx") is PocketSphinxEngine
    assert isinstance(engine, Transcriber)
    assert PocketSphinxEngine.select_device("cuda") == "cpu"
    assert PocketSphinxEngine.select_device_without_runtime("auto") == "cpu"


def test_check_spec_and_sizes(engine: PocketSphinxEngine, tmp_path) -> None:
    PocketSphinxEngine.check_spec(spec())
    assert engine.estimated_load_bytes() > 30_000_000  # the 27 MB language model and the rest
    assert engine.memory_usage().ram_bytes == engine.estimated_load_bytes()
    (tmp_path / "en-us").mkdir()
    with pytest.raises(ModelLoadError) as caught:
        PocketSphinxEngine.check_spec(ModelSpec("x", "pocketsphinx", (Task.TRANSCRIBE,), str(tmp_path)))
    assert caught.value.reason == Reason.MODEL_SOURCE_MISSING
    assert "language_model" in caught.value.message and "dictionary" in caught.value.message
    with pytest.raises(ModelLoadError) as caught:
        PocketSphinxEngine.check_spec(spec(dictionary="../../etc/passwd"))
    assert caught.value.reason == Reason.MODEL_SOURCE_INVALID


def test_choosing_the_device_and_loading_import_no_torch() -> None:
    # In a fresh interpreter: other tests of this process may have imported torch.
    code = (
        "import sys\n"
        "from engines.registry import engine_class\n"
        "from engines.base import ModelSpec\n"
        "from engines.executor import DeviceExecutor\n"
        "cls = engine_class('pocketsphinx')\n"
        "spec = ModelSpec('p', 'pocketsphinx', ('transcribe',), 'pkg://pocketsphinx/model/en-us')\n"
        "engine = cls(spec, cls.select_device('auto'), DeviceExecutor('cpu'))\n"
        "engine.load()\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[3], timeout=120)


@pytest.mark.parametrize("text", READ_RIGHT)
async def test_sentences_read_right(engine: PocketSphinxEngine, text: str) -> None:
    samples = padded(text)
    info, segments = await transcribe(engine, samples, TranscriptionOptions(word_timestamps=True))
    assert info.language == "en"
    assert info.duration_s == pytest.approx(len(samples) / RATE, abs=0.01)
    assert " ".join(segment.text for segment in segments) == text
    assert [segment.id for segment in segments] == list(range(len(segments)))
    words = [word for segment in segments for word in segment.words]
    assert [word.word for word in words] == text.split()
    start, end = spoken_extent(samples)
    for word in words:
        assert start - 0.3 <= word.start_s < word.end_s <= end + 0.3
        assert 0.0 <= word.probability <= 1.0
    starts = [word.start_s for word in words]
    assert starts == sorted(starts)


async def test_word_error_rate_on_espeak(engine: PocketSphinxEngine) -> None:
    errors = words = 0
    for text in SENTENCES:
        _, segments = await transcribe(engine, padded(text))
        wrong, count = word_errors(text, " ".join(segment.text for segment in segments))
        errors, words = errors + wrong, words + count
    assert errors / words <= MAX_WER, f"WER {errors / words:.3f} over {words} words"


async def test_two_sentences_with_a_gap_are_two_segments(engine: PocketSphinxEngine) -> None:
    first, second = speech("open the door please"), speech("please call me tomorrow morning")
    samples = np.concatenate([silence(0.5), first, silence(2.0), second, silence(0.5)])
    second_start = 0.5 + (len(first) + 2.0 * RATE) / RATE + spoken_extent(second)[0]
    _, segments = await transcribe(engine, samples)
    assert len(segments) == 2
    assert segments[0].text == "open the door please"
    assert segments[1].text == "please call me tomorrow morning"
    assert segments[0].start_s < segments[0].end_s < segments[1].start_s < segments[1].end_s
    assert segments[1].start_s == pytest.approx(second_start, abs=0.3)
    assert segments[1].start_s - segments[0].end_s > 1.5
    assert segments[1].end_s <= len(samples) / RATE
    assert all(segment.words == () for segment in segments)  # not asked for


async def test_without_vad_fixed_windows_read_the_same() -> None:
    engine = PocketSphinxEngine(spec(vad=False), "cpu", DeviceExecutor("cpu"))
    engine.load()
    assert engine.vad is None
    _, segments = await transcribe(engine, padded("i would like a cup of coffee"))
    assert " ".join(segment.text for segment in segments) == "i would like a cup of coffee"


async def test_silence_gives_no_segment(engine: PocketSphinxEngine) -> None:
    info, segments = await transcribe(engine, silence(3.0))
    assert info.duration_s == pytest.approx(3.0)
    assert segments == []


def test_languages(engine: PocketSphinxEngine) -> None:
    assert engine.resolve_language(None) == "en"
    assert engine.resolve_language("EN") == "en"
    with pytest.raises(InvalidArgumentError) as caught:
        engine.resolve_language("de")
    assert caught.value.reason == Reason.UNSUPPORTED_LANGUAGE


async def test_german_and_translation_are_refused_before_decoding(engine: PocketSphinxEngine) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        await transcribe(engine, silence(1.0), TranscriptionOptions(language="de"))
    assert caught.value.reason == Reason.UNSUPPORTED_LANGUAGE
    with pytest.raises(InvalidArgumentError) as caught:
        # Refused before the (empty) file is looked at.
        stream = engine.transcribe(b"", LIMITS, TranscriptionOptions(task=TranscriptionTask.TRANSLATE))
        await anext(stream)
    assert caught.value.reason == Reason.INVALID_ARGUMENT
    assert "translate" in caught.value.message


async def test_bad_audio_errors_come_through(engine: PocketSphinxEngine) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        await anext(engine.transcribe(b"", LIMITS, TranscriptionOptions()))
    assert caught.value.reason == Reason.EMPTY_FILE
    with pytest.raises(ResourceExhaustedError) as caught:
        await anext(
            engine.transcribe(wav(silence(3.0)), AudioLimits(10_000_000, 2.0), TranscriptionOptions())
        )
    assert caught.value.reason == Reason.AUDIO_TOO_LONG


def test_segments_are_placed_inside_their_window() -> None:
    window = SpeechWindow(start_s=10.0, end_s=12.0, samples=np.zeros(32000, np.float32))
    segment = TranscriptSegment(
        id=5,
        start_s=-0.5,
        end_s=3.0,
        text="a b",
        words=(TranscriptWord("a", 0.5, 1.0), TranscriptWord("b", 1.5, 9.0, 0.5)),
    )
    placed = place_segment(segment, window, 0)
    assert (placed.id, placed.start_s, placed.end_s, placed.text) == (0, 10.0, 12.0, "a b")
    assert [(w.start_s, w.end_s, w.probability) for w in placed.words] == [
        (10.5, 11.0, 1.0),
        (11.5, 12.0, 0.5),
    ]


def test_dictionary_words_and_fillers() -> None:
    assert dictionary_word("read(2)") == "read"
    assert dictionary_word("o'clock") == "o'clock"
    assert all(is_filler(w) for w in ("<s>", "</s>", "<sil>", "[NOISE]", "++UM++"))
    assert not is_filler("door")
