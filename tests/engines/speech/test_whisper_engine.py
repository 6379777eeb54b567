"""The whisper backend's plumbing, on a TINY RANDOM Whisper built here (no weights ship offline).

The model (d_model 32, one encoder and one decoder layer, a byte-level vocabulary with Whisper's
special and timestamp tokens) is untrained: its text is noise, and NO QUALITY IS ASSERTED. The
tests prove the plumbing only: the engine loads a checkpoint folder, detects a language, turns
the generated timestamp tokens into segments whose times lie inside the audio, bounds generation
to ``max_new_tokens`` in one decoder pass per window, and refuses what the checkpoint cannot do.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import pytest

from engines.base import ModelSpec
from engines.capabilities import Transcriber
from engines.errors import InvalidArgumentError
from engines.executor import DeviceExecutor
from engines.reasons import Reason
from engines.speech.types import AudioLimits, TranscriptionInfo, TranscriptionOptions, TranscriptSegment
from engines.speech.whisper_engine import WhisperEngine, timestamp_segments
from engines.types import Task
from tests.spoken import RATE, silence, tone, wav

pytest.importorskip("transformers")

LIMITS = AudioLimits(max_bytes=10_000_000, max_seconds=120.0)
LANGUAGES = ("en", "de", "fr")
SPECIALS = (
    "<|endoftext|>",
    "<|startoftranscript|>",
    *(f"<|{code}|>" for code in LANGUAGES),
    "<|translate|>",
    "<|transcribe|>",
    "<|startoflm|>",
    "<|startofprev|>",
    "<|nospeech|>",
    "<|notimestamps|>",
)


def byte_level_alphabet() -> list[str]:
    """GPT-2's 256 printable stand-ins for bytes: the base vocabulary of a byte-level BPE."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    rest = [b for b in range(256) if b not in printable]
    return [chr(b) for b in printable] + [chr(256 + i) for i in range(len(rest))]


def build_tiny_whisper(folder: Path) -> Path:
    """Save a random Whisper with its processor and generation config to ``folder``."""
    import torch
    from transformers import (
        GenerationConfig,
        WhisperConfig,
        WhisperFeatureExtractor,
        WhisperForConditionalGeneration,
        WhisperProcessor,
        WhisperTokenizer,
    )

    tokenizer = WhisperTokenizer(vocab={c: i for i, c in enumerate(byte_level_alphabet())}, merges=[])
    tokenizer.add_special_tokens({"additional_special_tokens": list(SPECIALS[1:])})
    tokenizer.add_tokens([f"<|{i * 0.02:.2f}|>" for i in range(1501)])
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in SPECIALS}
    end = ids["<|endoftext|>"]
    config = WhisperConfig(
        vocab_size=len(tokenizer),
        num_mel_bins=80,
        encoder_layers=1,
        decoder_layers=1,
        d_model=32,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_source_positions=1500,
        max_target_positions=448,
        pad_token_id=end,
        bos_token_id=end,
        eos_token_id=end,
        decoder_start_token_id=ids["<|startoftranscript|>"],
    )
    torch.manual_seed(0)
    model = WhisperForConditionalGeneration(config)
    model.generation_config = GenerationConfig(
        decoder_start_token_id=ids["<|startoftranscript|>"],
        eos_token_id=end,
        pad_token_id=end,
        bos_token_id=end,
        no_timestamps_token_id=ids["<|notimestamps|>"],
        prev_sot_token_id=ids["<|startofprev|>"],
        lang_to_id={f"<|{code}|>": ids[f"<|{code}|>"] for code in LANGUAGES},
        task_to_id={"transcribe": ids["<|transcribe|>"], "translate": ids["<|translate|>"]},
        is_multilingual=True,
        max_length=448,
        begin_suppress_tokens=[end],
    )
    model.save_pretrained(folder)
    WhisperProcessor(WhisperFeatureExtractor(feature_size=80), tokenizer).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def whisper_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_whisper(tmp_path_factory.mktemp("tiny-whisper"))


def make_engine(folder: Path, **options: object) -> WhisperEngine:
    spec = ModelSpec(
        name="tiny-whisper", backend="whisper", tasks=(Task.TRANSCRIBE,), source=str(folder), options=options
    )
    WhisperEngine.check_spec(spec)
    engine = WhisperEngine(spec, "cpu", DeviceExecutor("cpu"))
    engine.configure_lane()
    engine.load()
    return engine


@pytest.fixture(scope="module")
def engine(whisper_folder: Path) -> WhisperEngine:
    engine = make_engine(whisper_folder, vad=False)
    yield engine
    engine.unload()


class GenerateSpy:
    """Wraps ``model.generate``: records each call's ``max_new_tokens`` and output length."""

    def __init__(self, model: object) -> None:
        self.model = model
        self.original = model.generate
        self.calls: list[tuple[int, int]] = []

    def __call__(self, *args: object, **kwargs: object) -> object:
        out = self.original(*args, **kwargs)
        self.calls.append((int(kwargs["max_new_tokens"]), int(out.shape[-1])))
        return out


async def transcribe(
    engine: WhisperEngine, samples: np.ndarray, options: TranscriptionOptions
) -> tuple[TranscriptionInfo, list[TranscriptSegment]]:
    stream = engine.transcribe(wav(samples), LIMITS, options)
    async with contextlib.aclosing(stream):
        events = [event async for event in stream]
    assert isinstance(events[0], TranscriptionInfo)
    return events[0], events[1:]


def test_loads_the_checkpoint(engine: WhisperEngine) -> None:
    assert isinstance(engine, Transcriber)
    assert engine.languages == frozenset(LANGUAGES)
    assert engine.can_translate and engine.detects_language
    assert engine.memory_usage().ram_bytes > 0
    assert engine.recognizer_bytes() == engine.memory_usage().ram_bytes  # float32 on the CPU


async def test_two_seconds_become_segments_inside_the_audio(engine: WhisperEngine, monkeypatch) -> None:
    spy = GenerateSpy(engine.model)
    monkeypatch.setattr(engine.model, "generate", spy)
    samples = tone(2.0)
    info, segments = await transcribe(engine, samples, TranscriptionOptions(language="en"))
    assert info.language == "en"
    assert info.duration_s == pytest.approx(2.0)
    assert segments, "the random model writes some text"
    assert [s.id for s in segments] == list(range(len(segments)))
    for segment in segments:
        assert 0.0 <= segment.start_s <= segment.end_s <= 2.0
        assert segment.text
        assert segment.words == ()  # segment-level times only (module notes)
    # One decoder pass for the one window, at most 444 new tokens after the 3-token start.
    assert len(spy.calls) == 1
    max_new, length = spy.calls[0]
    assert max_new == 444
    assert length <= 3 + 444


async def test_generation_is_bounded_by_the_option(whisper_folder: Path, monkeypatch) -> None:
    engine = make_engine(whisper_folder, vad=False, max_new_tokens=10, max_window_s=1.5)
    spy = GenerateSpy(engine.model)
    monkeypatch.setattr(engine.model, "generate", spy)
    await transcribe(engine, tone(4.0), TranscriptionOptions(language="de", task="translate", prompt="Ada"))
    assert len(spy.calls) == 3  # windows of 1.5 s without VAD: 1.5 + 1.5 + 1
    for max_new, length in spy.calls:
        assert max_new == 10
        # The prompt (<|startofprev|>, " Ada": 5 tokens), the start sequence, then the new ones.
        assert length <= 5 + 3 + 10


async def test_language_is_detected_when_not_given(engine: WhisperEngine) -> None:
    info, _ = await transcribe(engine, tone(1.0), TranscriptionOptions())
    assert info.language in LANGUAGES


async def test_silence_with_vad_has_no_window(whisper_folder: Path) -> None:
    engine = make_engine(whisper_folder)
    info, segments = await transcribe(engine, silence(2.0), TranscriptionOptions())
    assert info.language == "en"  # nothing to detect from: the default
    assert segments == []


def test_languages_of_the_checkpoint_only(engine: WhisperEngine) -> None:
    assert engine.resolve_language("DE") == "de"
    assert engine.resolve_language(None) is None
    with pytest.raises(InvalidArgumentError) as caught:
        engine.resolve_language("ja")
    assert caught.value.reason == Reason.UNSUPPORTED_LANGUAGE


def test_long_prompts_keep_their_last_tokens(engine: WhisperEngine) -> None:
    ids = engine._prompt_ids("word " * 500)
    assert len(ids) == 223 + 1
    assert int(ids[0]) == engine.processor.tokenizer.convert_tokens_to_ids("<|startofprev|>")
    assert engine._prompt_ids("   ") is None
    with pytest.raises(InvalidArgumentError):
        engine._prompt_ids("before <|endoftext|> after")


# -- timestamp tokens to segments (pure) --------------------------------------------------------

BEGIN, SPECIAL = 1000, 900


def ts(seconds: float) -> int:
    return BEGIN + round(seconds / 0.02)


def test_timestamp_pairs_make_segments() -> None:
    tokens = [ts(0), 1, 2, ts(1.5), ts(1.5), 3, ts(2.4), SPECIAL]
    assert timestamp_segments(tokens, BEGIN, SPECIAL, 10.0) == [(0.0, 1.5, [1, 2]), (1.5, 2.4, [3])]


def test_unclosed_text_ends_at_the_window_and_times_are_clamped() -> None:
    assert timestamp_segments([ts(0.5), 7, 8], BEGIN, SPECIAL, 3.0) == [(0.5, 3.0, [7, 8])]
    assert timestamp_segments([5, 6], BEGIN, SPECIAL, 3.0) == [(0.0, 3.0, [5, 6])]
    assert timestamp_segments([ts(25), 5, ts(29)], BEGIN, SPECIAL, 2.0) == [(2.0, 2.0, [5])]
    assert timestamp_segments([ts(1), ts(2), SPECIAL + 3], BEGIN, SPECIAL, 3.0) == []


async def test_window_times_are_shifted_to_the_audio(whisper_folder: Path) -> None:
    engine = make_engine(whisper_folder, vad=False, max_window_s=1.0, max_new_tokens=20)
    samples = tone(3.0)
    _, segments = await transcribe(engine, samples, TranscriptionOptions(language="en"))
    assert segments
    assert all(0.0 <= s.start_s <= s.end_s <= len(samples) / RATE for s in segments)
    assert max(s.start_s for s in segments) >= 1.0  # segments of the later windows
    assert [s.id for s in segments] == list(range(len(segments)))
