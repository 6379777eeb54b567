"""Voice activity detection (engines.speech.vad): Silero VAD on ONNX Runtime, and the windows cut from it.

Speech is eSpeak NG's; boundaries are checked against where the synthesized signal is loud.
"""

from __future__ import annotations

import itertools
import sys

import numpy as np
import pytest

from engines.speech.types import Audio
from engines.speech.vad import (
    FRAME_S,
    FRAME_SAMPLES,
    SileroVad,
    VadState,
    fixed_windows,
    speech_runs,
    speech_windows,
)
from tests.spoken import RATE, silence, speech, spoken_extent

FOX = "the quick brown fox jumps over the lazy dog"
DOOR = "open the door please"


@pytest.fixture(scope="module")
def vad() -> SileroVad:
    return SileroVad()


@pytest.fixture(scope="module")
def two_sentences() -> tuple[np.ndarray, list[tuple[float, float]]]:
    """FOX, 2 s of silence, DOOR (with 0.5 s around), and where each sentence is loud, seconds."""
    first, second = speech(FOX), speech(DOOR)
    lead, gap = silence(0.5), silence(2.0)
    samples = np.concatenate([lead, first, gap, second, lead])
    a0, a1 = spoken_extent(first)
    b0, b1 = spoken_extent(second)
    offset_b = (len(lead) + len(first) + len(gap)) / RATE
    return samples, [(0.5 + a0, 0.5 + a1), (offset_b + b0, offset_b + b1)]


def test_no_torch_is_imported(vad: SileroVad) -> None:
    vad.speech_probabilities(silence(0.1))
    assert "silero_vad" not in sys.modules  # its package imports torch


def test_one_probability_per_frame(vad: SileroVad) -> None:
    for length in (1, FRAME_SAMPLES - 1, FRAME_SAMPLES, 10 * FRAME_SAMPLES + 3):
        probabilities = vad.speech_probabilities(np.zeros(length, np.float32))
        assert probabilities.shape == (-(-length // FRAME_SAMPLES),)
        assert probabilities.dtype == np.float32
    assert vad.speech_probabilities(np.zeros(0, np.float32)).shape == (0,)


def test_pieces_with_state_equal_one_call(vad: SileroVad, two_sentences) -> None:
    samples, _ = two_sentences
    whole = vad.speech_probabilities(samples)
    state = VadState()
    cut = 37 * FRAME_SAMPLES
    pieces = np.concatenate(
        [vad.speech_probabilities(samples[:cut], state), vad.speech_probabilities(samples[cut:], state)]
    )
    np.testing.assert_array_equal(pieces, whole)
    assert ((whole >= 0) & (whole <= 1)).all()


def test_two_sentences_give_two_runs_at_their_boundaries(vad: SileroVad, two_sentences) -> None:
    samples, truth = two_sentences
    runs = speech_runs(vad.speech_probabilities(samples))
    assert len(runs) == 2
    for (first, end), (start_s, end_s) in zip(runs, truth, strict=True):
        assert first * FRAME_S == pytest.approx(start_s, abs=0.3)
        assert end * FRAME_S == pytest.approx(end_s, abs=0.3)


def test_two_sentences_fit_one_window_with_padding(vad: SileroVad, two_sentences) -> None:
    samples, truth = two_sentences
    audio = Audio(samples, RATE)
    windows = speech_windows(audio, vad.speech_probabilities(samples), speech_pad_s=0.1)
    # 7 s of audio: one window from the first sentence to the second, cut in no silence.
    assert len(windows) == 1
    window = windows[0]
    assert window.start_s == pytest.approx(truth[0][0] - 0.1, abs=0.3)
    assert window.end_s == pytest.approx(truth[1][1] + 0.1, abs=0.3)
    first = round(window.start_s * RATE)
    np.testing.assert_array_equal(window.samples, samples[first : first + len(window.samples)])
    assert np.shares_memory(window.samples, samples)


def test_short_windows_split_at_the_silence(vad: SileroVad, two_sentences) -> None:
    samples, truth = two_sentences
    windows = speech_windows(Audio(samples, RATE), vad.speech_probabilities(samples), max_window_s=4.0)
    assert len(windows) == 2
    assert windows[0].end_s < truth[1][0] and windows[1].start_s > truth[0][1]


@pytest.mark.parametrize("level", [0.0, 0.001, 0.005])
def test_silence_and_low_noise_hold_no_speech(vad: SileroVad, level: float) -> None:
    samples = (np.random.default_rng(0).normal(0, level, 5 * RATE)).astype(np.float32)
    probabilities = vad.speech_probabilities(samples)
    assert speech_runs(probabilities) == []
    assert speech_windows(Audio(samples, RATE), probabilities) == []


def test_seventy_seconds_of_speech_give_windows_of_at_most_30_s(vad: SileroVad) -> None:
    sentences = [speech(text) for text in (FOX, DOOR, "please call me tomorrow morning")]
    pieces, spans, at = [], [], 0
    while at < 70 * RATE:
        sentence = sentences[len(spans) % len(sentences)]
        start, end = spoken_extent(sentence)
        spans.append((at / RATE + start, at / RATE + end))
        pieces += [sentence, silence(0.4)]
        at += len(sentence) + int(0.4 * RATE)
    samples = np.concatenate(pieces)
    windows = speech_windows(Audio(samples, RATE), vad.speech_probabilities(samples))
    assert len(windows) >= 3
    for window in windows:
        assert window.end_s - window.start_s <= 30.0 + 1 / RATE
        assert len(window.samples) == round((window.end_s - window.start_s) * RATE)
    for before, after in itertools.pairwise(windows):
        assert before.end_s <= after.start_s
    # Every sentence's middle lies in a window: together they cover the speech.
    for start, end in spans:
        middle = (start + end) / 2
        assert any(w.start_s <= middle <= w.end_s for w in windows), middle


# -- the pure functions, on made-up probabilities -----------------------------------------------


def frames(*pattern: tuple[float, float]) -> np.ndarray:
    """Probabilities: ``(value, seconds)`` pieces one after another (boundaries within half a frame)."""
    ends = np.round(np.cumsum([seconds for _, seconds in pattern]) / FRAME_S).astype(int)
    starts = [0, *ends[:-1]]
    return np.concatenate(
        [
            np.full(end - start, value, np.float32)
            for (value, _), start, end in zip(pattern, starts, ends, strict=True)
        ]
    )


def audio_for(probabilities: np.ndarray) -> Audio:
    return Audio(np.zeros(len(probabilities) * FRAME_SAMPLES, np.float32), RATE)


def test_short_pauses_merge_and_long_ones_split() -> None:
    probabilities = frames((0, 1), (0.9, 1), (0.1, 0.2), (0.9, 1), (0.1, 1), (0.9, 1), (0, 1))
    runs = speech_runs(probabilities, min_silence_s=0.3)
    assert len(runs) == 2
    assert runs[0][0] * FRAME_S == pytest.approx(1, abs=FRAME_S)
    assert runs[0][1] * FRAME_S == pytest.approx(3.2, abs=FRAME_S)
    assert runs[1][0] * FRAME_S == pytest.approx(4.2, abs=FRAME_S)


def test_hysteresis_keeps_a_wavering_run_whole() -> None:
    # 0.4 is below the threshold but above threshold - 0.15: speech goes on.
    probabilities = frames((0.9, 0.5), (0.4, 1.0), (0.9, 0.5))
    assert len(speech_runs(probabilities, threshold=0.5)) == 1


def test_blips_are_dropped() -> None:
    assert speech_runs(frames((0, 1), (0.9, 0.1), (0, 1)), min_speech_s=0.25) == []


def test_padding_stays_inside_the_audio() -> None:
    probabilities = frames((0.9, 1), (0, 1), (0.9, 1))
    windows = speech_windows(audio_for(probabilities), probabilities, speech_pad_s=0.5, max_window_s=1.5)
    assert windows[0].start_s == 0.0
    assert windows[-1].end_s == pytest.approx(audio_for(probabilities).duration_s)
    # Padded by 0.5 s, the runs touch: merged into one run of 3 s, then cut hard in three.
    assert [w.end_s - w.start_s for w in windows] == pytest.approx([1.0, 1.0, 1.0], abs=FRAME_S)


def test_a_run_longer_than_a_window_is_cut_hard() -> None:
    probabilities = frames((1, 70))
    windows = speech_windows(audio_for(probabilities), probabilities, speech_pad_s=0, max_window_s=30)
    third = len(probabilities) * FRAME_S / 3
    bounds = [bound for w in windows for bound in (w.start_s, w.end_s)]
    assert bounds == pytest.approx([0, third, third, 2 * third, 2 * third, 3 * third], abs=1 / RATE)


def test_max_window_must_be_positive() -> None:
    probabilities = frames((1, 1))
    with pytest.raises(ValueError):
        speech_windows(audio_for(probabilities), probabilities, max_window_s=0)
    with pytest.raises(ValueError):
        fixed_windows(audio_for(probabilities), 0)


def test_fixed_windows_cover_the_audio() -> None:
    audio = Audio(np.arange(int(65.5 * RATE), dtype=np.float32), RATE)
    windows = fixed_windows(audio, 30)
    assert [(w.start_s, w.end_s) for w in windows] == [(0, 30), (30, 60), (60, 65.5)]
    assert sum(len(w.samples) for w in windows) == len(audio.samples)
