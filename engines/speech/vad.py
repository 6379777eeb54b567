"""Voice activity detection: Silero VAD (the ONNX model the ``silero-vad`` package ships) on ONNX Runtime.

The model is run directly with ONNX Runtime and numpy, reproducing the framing of the package's
``OnnxWrapper`` (``silero_vad/utils_vad.py``) without importing torch: 16 kHz audio in frames of
512 samples, each sent with the 64 samples before it (zeros before the first) and the recurrent
state of the previous frame; the model answers one speech probability per frame.

:func:`speech_windows` turns those probabilities into the windows a recognizer reads: speech runs
(hysteresis on the probability, like silero's ``get_speech_timestamps``), padded, merged across
short silences, and grouped into windows of at most ``max_window_s`` cut in the silences (a run
longer than that is cut into equal pieces).
"""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engines.speech.types import Audio, SpeechWindow

SAMPLE_RATE = 16000
"""The only rate the model is run at, Hz."""
FRAME_SAMPLES = 512
"""Samples per frame (32 ms at 16 kHz): one probability each."""
CONTEXT_SAMPLES = 64
"""Samples of the previous frame sent before each frame."""
FRAME_S = FRAME_SAMPLES / SAMPLE_RATE
"""Seconds per frame."""
VAD_LOAD_BYTES = 24 * 1024 * 1024
"""Host memory of a loaded Silero VAD: its ONNX Runtime session and arenas (about 21 MB measured
with ``bench.memory_estimate``'s method)."""
NEGATIVE_MARGIN = 0.15
"""Speech ends where the probability falls below ``threshold - NEGATIVE_MARGIN`` (silero's default)."""


def packaged_model_path() -> Path:
    """The ``silero_vad.onnx`` file of the installed ``silero-vad`` package (found without importing it).

    Raises:
        FileNotFoundError: the package, or its model file, is not installed.

    """
    spec = importlib.util.find_spec("silero_vad")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the silero-vad package is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "silero_vad.onnx"
    if not path.is_file():
        raise FileNotFoundError(f"Silero VAD model not found at {path}")
    return path


@dataclass
class VadState:
    """The model's memory between calls on one audio: its recurrent state and the last samples.

    Attributes:
        rnn: float32 (2, 1, 128), the model's ``state``.
        context: float32 (64,), the samples before the next frame.

    """

    rnn: np.ndarray = field(default_factory=lambda: np.zeros((2, 1, 128), dtype=np.float32))
    context: np.ndarray = field(default_factory=lambda: np.zeros(CONTEXT_SAMPLES, dtype=np.float32))


class SileroVad:
    """The Silero VAD ONNX model in one ONNX Runtime session (CPU, one thread: frames are sequential).

    Load once and reuse; calls are not thread-safe (run them on one lane).

    Args:
        path: the ONNX file; default :func:`packaged_model_path`.

    Raises:
        FileNotFoundError: no model file.
        ValueError: the file is not a v5/v6 Silero model (inputs ``input``, ``state``, ``sr``).

    """

    def __init__(self, path: Path | None = None) -> None:
        import onnxruntime

        options = onnxruntime.SessionOptions()
        # A frame is 576 samples through a small network: more threads only add synchronisation.
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self.path = path or packaged_model_path()
        self.session = onnxruntime.InferenceSession(
            str(self.path), sess_options=options, providers=["CPUExecutionProvider"]
        )
        names = {i.name for i in self.session.get_inputs()}
        if names != {"input", "state", "sr"}:
            raise ValueError(f"{self.path} is not a Silero VAD v5/v6 model (inputs {sorted(names)})")
        self._sr = np.array(SAMPLE_RATE, dtype=np.int64)

    def speech_probabilities(self, samples: np.ndarray, state: VadState | None = None) -> np.ndarray:
        """Speech probability of each 512-sample frame of ``samples``.

        Linear in the samples (one small model call per 32 ms frame, about 0.1 ms on a CPU core).

        Args:
            samples: float32 mono audio at 16 kHz, shape (n,). A last partial frame is padded
                with zeros.
            state: the state left by the previous call on the same audio, updated in place, so
                long audio can be run in pieces whose lengths (but the last) are multiples of
                512; None starts afresh.

        Returns:
            float32 array of shape (ceil(n / 512),), each in [0, 1].

        """
        state = state if state is not None else VadState()
        samples = np.asarray(samples, dtype=np.float32).reshape(-1)
        count = -(-len(samples) // FRAME_SAMPLES)
        padded = np.zeros(count * FRAME_SAMPLES, dtype=np.float32)
        padded[: len(samples)] = samples
        probabilities = np.empty(count, dtype=np.float32)
        rnn, context = state.rnn, state.context
        for i in range(count):
            frame = padded[i * FRAME_SAMPLES : (i + 1) * FRAME_SAMPLES]
            x = np.concatenate((context, frame))[None, :]
            out, rnn = self.session.run(None, {"input": x, "state": rnn, "sr": self._sr})
            probabilities[i] = out.reshape(-1)[0]
            context = frame[-CONTEXT_SAMPLES:]
        state.rnn, state.context = rnn, context.copy()
        return probabilities


def speech_runs(
    probabilities: np.ndarray,
    *,
    threshold: float = 0.5,
    min_silence_s: float = 0.3,
    min_speech_s: float = 0.25,
) -> list[tuple[int, int]]:
    """Runs of speech frames in per-frame speech probabilities.

    A run starts at a frame ``>= threshold`` and ends after ``min_silence_s`` of frames below
    ``threshold - 0.15`` (hysteresis: a wavering probability does not cut a word). Runs shorter
    than ``min_speech_s`` (a click, a cough) are dropped.

    Returns:
        ``[(first_frame, end_frame), ...]`` in order, ``end_frame`` exclusive, not overlapping.

    """
    negative = max(threshold - NEGATIVE_MARGIN, 0.01)
    silence_frames = max(1, round(min_silence_s / FRAME_S))
    speech_frames = max(1, round(min_speech_s / FRAME_S))
    runs: list[tuple[int, int]] = []
    start: int | None = None
    last_speech = 0
    for i, p in enumerate(np.asarray(probabilities, dtype=np.float32)):
        if p >= threshold:
            if start is None:
                start = i
            last_speech = i
        elif start is not None and p < negative and i - last_speech >= silence_frames:
            runs.append((start, last_speech + 1))
            start = None
    if start is not None:
        runs.append((start, last_speech + 1))
    return [(a, b) for a, b in runs if b - a >= speech_frames]


def speech_windows(
    audio: Audio,
    probabilities: np.ndarray,
    *,
    threshold: float = 0.5,
    min_silence_s: float = 0.3,
    speech_pad_s: float = 0.1,
    max_window_s: float = 30.0,
    min_speech_s: float = 0.25,
) -> list[SpeechWindow]:
    """Windows of ``audio`` that hold speech, for one recognizer call each.

    Speech runs (:func:`speech_runs`) are padded by ``speech_pad_s`` on both sides (within the
    audio), runs that then overlap are merged, and consecutive runs are grouped into windows that
    span at most ``max_window_s``: a window is cut in the silence between two runs, and a single
    run longer than ``max_window_s`` is cut hard into the fewest equal pieces that fit. Work is
    linear in the frames.

    Args:
        audio: the whole audio (any rate: times come from ``audio.sample_rate``); the
            probabilities must be of its samples at 16 kHz framing (one per 32 ms).
        probabilities: speech probability per 512-sample frame (:meth:`SileroVad.speech_probabilities`).
        threshold: probability (0-1) from which a frame is speech.
        min_silence_s: seconds of silence that end a run; shorter pauses stay inside it.
        speech_pad_s: seconds added before and after each run.
        max_window_s: longest window, seconds (> 0).
        min_speech_s: runs shorter than this, seconds, are dropped.

    Returns:
        Windows in order, not overlapping, each at most ``max_window_s`` long, their samples views
        of ``audio.samples``; ``[]`` for audio without speech.

    Raises:
        ValueError: ``max_window_s`` not positive.

    """
    if max_window_s <= 0:
        raise ValueError(f"max_window_s must be positive, got {max_window_s}")
    duration = audio.duration_s
    spans: list[list[float]] = []
    for first, end in speech_runs(
        probabilities, threshold=threshold, min_silence_s=min_silence_s, min_speech_s=min_speech_s
    ):
        start_s = max(0.0, first * FRAME_S - speech_pad_s)
        end_s = min(duration, end * FRAME_S + speech_pad_s)
        if end_s <= start_s:
            continue
        if spans and start_s <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], end_s)
        else:
            spans.append([start_s, end_s])
    groups: list[tuple[float, float]] = []
    for start_s, end_s in spans:
        if groups and end_s - groups[-1][0] <= max_window_s:
            groups[-1] = (groups[-1][0], end_s)
            continue
        # A run longer than a window: cut hard into equal pieces (no sliver of a window at its end).
        pieces = max(1, math.ceil((end_s - start_s) / max_window_s - 1e-9))
        length = (end_s - start_s) / pieces
        groups.extend((start_s + i * length, start_s + (i + 1) * length) for i in range(pieces))
    return [window_of(audio, start_s, end_s) for start_s, end_s in groups]


def fixed_windows(audio: Audio, max_window_s: float) -> list[SpeechWindow]:
    """``audio`` cut into consecutive windows of ``max_window_s`` (the last shorter): no VAD.

    Raises:
        ValueError: ``max_window_s`` not positive.

    """
    if max_window_s <= 0:
        raise ValueError(f"max_window_s must be positive, got {max_window_s}")
    step = max(1, int(max_window_s * audio.sample_rate))
    return [
        window_of(audio, i / audio.sample_rate, min(len(audio.samples), i + step) / audio.sample_rate)
        for i in range(0, len(audio.samples), step)
    ]


def window_of(audio: Audio, start_s: float, end_s: float) -> SpeechWindow:
    """The window of ``audio`` from ``start_s`` to ``end_s`` (seconds), its samples a view."""
    first = max(0, round(start_s * audio.sample_rate))
    end = min(len(audio.samples), round(end_s * audio.sample_rate))
    return SpeechWindow(
        start_s=first / audio.sample_rate, end_s=end / audio.sample_rate, samples=audio.samples[first:end]
    )
