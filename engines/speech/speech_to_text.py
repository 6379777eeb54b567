"""The speech-to-text engine base class: encoded audio in, timed transcript segments out.

A call (:meth:`SpeechToTextEngine.transcribe`) is a series of bounded lane jobs, so other callers'
work interleaves between them: decoding the file (bounded by :class:`AudioLimits`), voice activity
detection in pieces of :data:`VAD_JOB_S` seconds, then one recognizer call per window of at most
``max_window_s`` seconds.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import AsyncIterator
from typing import Any, ClassVar, TypeVar

import numpy as np

from engines.base import Engine
from engines.errors import InvalidArgumentError
from engines.reasons import Reason
from engines.speech.audio_decode import decode_audio
from engines.speech.options import SpeechToTextOptions
from engines.speech.types import (
    Audio,
    AudioLimits,
    SpeechWindow,
    TranscriptionEvent,
    TranscriptionInfo,
    TranscriptionOptions,
    TranscriptionTask,
    TranscriptSegment,
    TranscriptWord,
)
from engines.speech.vad import (
    FRAME_SAMPLES,
    VAD_LOAD_BYTES,
    SileroVad,
    VadState,
    fixed_windows,
    speech_windows,
)
from engines.types import Task

SpeechOptionsT = TypeVar("SpeechOptionsT", bound=SpeechToTextOptions)

VAD_JOB_S = 60
"""Seconds of audio whose speech probabilities one lane job computes (about 0.2 s of CPU)."""


class SpeechToTextEngine(Engine[SpeechOptionsT]):
    """A speech recognizer (the :class:`~engines.capabilities.Transcriber` capability).

    Subclasses set :attr:`languages` (and :attr:`can_translate`, :attr:`detects_language`) and
    implement :meth:`load_model`, :meth:`unload_model` and :meth:`recognize` (blocking, one
    window); they may override :meth:`detect_language`. The base loads Silero VAD in
    :meth:`load` when the ``vad`` option is on, and drives a call: decode, windows, recognize.
    """

    tasks = frozenset({Task.TRANSCRIBE})
    runs_in_backend_process = True
    sample_rate: ClassVar[int] = 16000
    """Rate the audio is decoded to and the recognizer reads, Hz (Silero VAD's)."""
    languages: ClassVar[frozenset[str]] = frozenset()
    """ISO 639-1 codes of the languages the model hears."""
    default_language: ClassVar[str] = "en"
    """The language reported when none is given and none is detected (audio without speech)."""
    detects_language: ClassVar[bool] = False
    """Whether :meth:`detect_language` listens to the audio; else a call without a language is in
    :attr:`default_language`."""
    can_translate: ClassVar[bool] = False
    """Whether the model translates speech into English (``task`` translate)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.vad: SileroVad | None = None

    # -- what subclasses implement ---------------------------------------------------------

    @abc.abstractmethod
    def load_model(self) -> None:
        """Load the recognizer's model (blocking; on the lane, after the VAD)."""

    @abc.abstractmethod
    def unload_model(self) -> None:
        """Drop the recognizer's model (blocking)."""

    @abc.abstractmethod
    def recognize(self, window: SpeechWindow, options: TranscriptionOptions) -> list[TranscriptSegment]:
        """Recognize one window (blocking; one lane job).

        Args:
            window: at most ``max_window_s`` seconds of float32 mono samples at :attr:`sample_rate`.
            options: the call's options; ``language`` is set (given or detected).

        Returns:
            Segments in order, times in seconds from the window's start (the caller shifts them
            and numbers them); words only when ``options.word_timestamps``.

        """

    def detect_language(self, samples: np.ndarray) -> str:
        """The ISO 639-1 code of the speech in ``samples`` (blocking; the first window's samples).

        The default answers :attr:`default_language` (a model of one language).
        """
        return self.default_language

    # -- Engine ----------------------------------------------------------------------------

    def load(self) -> None:
        """Load Silero VAD (when the ``vad`` option is on), then the recognizer's model."""
        self.vad = SileroVad() if self.options.vad else None
        self.load_model()

    def unload(self) -> None:
        """Drop the recognizer's model and the VAD."""
        self.unload_model()
        self.vad = None

    def recognizer_bytes(self) -> int:
        """Host bytes the recognizer's model holds once loaded, known before the load (0: unknown)."""
        return 0

    def estimated_load_bytes(self) -> int:
        """:meth:`recognizer_bytes`, plus Silero VAD's (:data:`VAD_LOAD_BYTES`) with the ``vad`` option."""
        return self.recognizer_bytes() + (VAD_LOAD_BYTES if self.options.vad else 0)

    # -- Transcriber -----------------------------------------------------------------------

    def resolve_language(self, language: str | None) -> str | None:
        """The code of ``language`` (ISO 639-1, any case) if the model hears it.

        Returns:
            The lower-case code; for None, None when the model detects languages, else
            :attr:`default_language`.

        Raises:
            InvalidArgumentError: a language not in :attr:`languages` (UNSUPPORTED_LANGUAGE).

        """
        if language is None or not language.strip():
            return None if self.detects_language else self.default_language
        code = language.strip().lower()
        if code not in self.languages:
            known = ", ".join(sorted(self.languages)[:20])
            more = ", ..." if len(self.languages) > 20 else ""
            raise InvalidArgumentError(
                f"model {self.spec.name!r} does not hear language {language!r}; it hears {known}{more}",
                reason=Reason.UNSUPPORTED_LANGUAGE,
                field="language",
                language=language,
            )
        return code

    def check_options(self, options: TranscriptionOptions) -> str | None:
        """Refuse what the model cannot do before any work (cheap); return the resolved language.

        Raises:
            InvalidArgumentError: an unsupported language (UNSUPPORTED_LANGUAGE), or translation
                asked of a model that cannot translate (INVALID_ARGUMENT, field ``task``).

        """
        if options.task == TranscriptionTask.TRANSLATE and not self.can_translate:
            raise InvalidArgumentError(
                f"model {self.spec.name!r} cannot translate speech; use task transcribe, or a "
                "Whisper model to translate",
                field="task",
            )
        return self.resolve_language(options.language)

    async def transcribe(
        self, data: bytes, limits: AudioLimits, options: TranscriptionOptions
    ) -> AsyncIterator[TranscriptionEvent]:
        """A :class:`TranscriptionInfo`, then each segment, ids from 0, times from the audio's start.

        Lane jobs: decoding, VAD per :data:`VAD_JOB_S` seconds, language detection (when asked
        and the model detects), then one :meth:`recognize` per window.

        Raises:
            InvalidArgumentError: see :meth:`check_options` and
                :func:`~engines.speech.audio_decode.decode_audio` (EMPTY_FILE,
                UNSUPPORTED_FORMAT).
            ResourceExhaustedError: over ``limits`` (FILE_TOO_LARGE, AUDIO_TOO_LONG).

        """
        language = self.check_options(options)
        audio = await self.executor.run(decode_audio, data, limits, self.sample_rate)
        windows = await self.windows(audio)
        if language is None:
            language = (
                await self.executor.run(self.detect_language, windows[0].samples)
                if windows
                else self.default_language
            )
        yield TranscriptionInfo(language=language, duration_s=audio.duration_s)
        options = dataclasses.replace(options, language=language)
        next_id = 0
        for window in windows:
            for segment in await self.executor.run(self.recognize, window, options):
                yield place_segment(segment, window, next_id)
                next_id += 1

    async def windows(self, audio: Audio) -> list[SpeechWindow]:
        """The windows of ``audio`` to recognize: its speech by VAD, or fixed windows without it."""
        if self.vad is None or not self.options.vad:
            return fixed_windows(audio, self.options.max_window_s)
        vad = self.vad
        state = VadState()
        step = VAD_JOB_S * self.sample_rate // FRAME_SAMPLES * FRAME_SAMPLES  # whole frames per job
        pieces = [
            await self.executor.run(vad.speech_probabilities, audio.samples[start : start + step], state)
            for start in range(0, len(audio.samples), step)
        ]
        probabilities = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.float32)
        return await self.executor.run(
            lambda: speech_windows(
                audio,
                probabilities,
                threshold=self.options.vad_threshold,
                min_silence_s=self.options.min_silence_s,
                speech_pad_s=self.options.speech_pad_s,
                max_window_s=self.options.max_window_s,
            )
        )


def place_segment(segment: TranscriptSegment, window: SpeechWindow, segment_id: int) -> TranscriptSegment:
    """``segment`` (times from ``window``'s start) with times from the audio's start and id ``segment_id``.

    Times are clamped into the window, so that a model's stray timestamp never points outside it.
    """

    def place(seconds: float) -> float:
        return min(window.end_s, max(window.start_s, window.start_s + seconds))

    start = place(segment.start_s)
    end = max(start, place(segment.end_s))
    words = tuple(
        TranscriptWord(
            word=w.word,
            start_s=place(w.start_s),
            end_s=max(place(w.start_s), place(w.end_s)),
            probability=w.probability,
        )
        for w in segment.words
    )
    return dataclasses.replace(segment, id=segment_id, start_s=start, end_s=end, words=words)
