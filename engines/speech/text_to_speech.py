"""The text-to-speech engine base class: text in, encoded speech out, a sentence per lane job.

A backend implements :meth:`TextToSpeechEngine.load_model`, :meth:`~TextToSpeechEngine.speak`
(one sentence to float32 samples) and :meth:`~TextToSpeechEngine.list_voices`; the base gives it
the :class:`~engines.capabilities.SpeechSynthesizer` capability: voice lookup, sentence splitting
(:mod:`engines.speech.sentences`), one lane job per sentence in the caller's fair turn, and
encoding (:mod:`engines.speech.audio_encode`) as the audio comes.
"""

from __future__ import annotations

import abc
import math
from collections.abc import AsyncIterator
from typing import ClassVar, TypeVar

import numpy as np

from engines.base import Engine, ModelSpec
from engines.errors import InvalidArgumentError
from engines.executor import DeviceExecutor
from engines.options import EngineOptions
from engines.process_lane import FairTurns, take_turn
from engines.reasons import Reason
from engines.speech.audio_encode import AudioEncoder
from engines.speech.sentences import MAX_SENTENCE_CHARS, split_sentences
from engines.speech.types import AudioFormat, SpeechAudio, SpeechOptions, Voice
from engines.types import Task

TtsOptionsT = TypeVar("TtsOptionsT", bound=EngineOptions)

#: Speeds a request may ask for, as a multiple of normal (OpenAI's range).
MIN_SPEED = 0.25
MAX_SPEED = 4.0
#: How many voice ids an UNKNOWN_VOICE error lists.
_VOICES_NAMED = 12


class TextToSpeechEngine(Engine[TtsOptionsT]):
    """A speech synthesizer (the :class:`~engines.capabilities.SpeechSynthesizer` capability).

    :meth:`load` (on the lane) calls :meth:`load_model`, then :meth:`list_voices` once and keeps
    the voices: lookups are cheap and happen before any work. Every call into the backend
    (:meth:`speak`, and encoding) runs on the engine's lane, one job at a time, so a backend with
    global, thread-unsafe state needs no locking of its own within one engine.
    """

    tasks = frozenset({Task.SYNTHESIZE_SPEECH})
    runs_in_backend_process = True
    sample_rate: int = 22050
    """Rate of the samples :meth:`speak` returns, Hz; a backend sets its own (at load if need be)."""
    max_sentence_chars: ClassVar[int] = MAX_SENTENCE_CHARS
    """Longest text one :meth:`speak` job gets, characters (longer sentences are cut)."""

    def __init__(self, spec: ModelSpec, device: str, executor: DeviceExecutor) -> None:
        super().__init__(spec, device, executor)
        self._voices: tuple[Voice, ...] = ()
        self._voices_by_id: dict[str, Voice] = {}
        # Callers take fair turns for sentence jobs on the lane (engines.process_lane.take_turn).
        self.turns = FairTurns(self.spec.name)

    @abc.abstractmethod
    def load_model(self) -> None:
        """Load the synthesizer (blocking, on the lane); set :attr:`sample_rate` if it is known only now."""

    @abc.abstractmethod
    def list_voices(self) -> tuple[Voice, ...]:
        """Every voice of the model, its default first (blocking; called once, by :meth:`load`)."""

    @abc.abstractmethod
    def speak(self, text: str, voice: Voice, speed: float) -> np.ndarray:
        """The speech of one sentence (blocking, on the lane).

        Args:
            text: a sentence of at most :attr:`max_sentence_chars` characters, stripped, not empty.
            voice: one of :meth:`list_voices`.
            speed: speaking rate as a multiple of normal, in [0.25, 4.0]; a backend clamps it to
                what it can do.

        Returns:
            float32 mono samples in [-1, 1] at :attr:`sample_rate`, shape (n,); may be empty.

        """

    def load(self) -> None:
        """:meth:`load_model`, then keep :meth:`list_voices` (blocking).

        Raises:
            RuntimeError: the model lists no voice.
            Exception: whatever :meth:`load_model` raises.

        """
        self.load_model()
        voices = tuple(self.list_voices())
        if not voices:
            raise RuntimeError(f"speech model {self.spec.name!r} has no voice")
        by_id: dict[str, Voice] = {}
        for voice in voices:
            by_id.setdefault(voice.id.lower(), voice)
        self._voices = tuple(voice for voice in voices if by_id[voice.id.lower()] is voice)
        self._voices_by_id = by_id

    @classmethod
    def select_device(cls, preference: str) -> str:
        """The CPU, whatever the preference (the speech backends here run on it); never imports torch."""
        return "cpu"

    async def voices(self) -> tuple[Voice, ...]:
        """The model's voices, its default first (ids unique, case-insensitively)."""
        return self._voices

    def resolve_voice(self, voice_id: str) -> Voice:
        """The voice a request names (cheap: call before any work).

        Ids match case-insensitively. A bare language (``fr``) that is no voice's id names a
        voice of that language: the one whose language is exactly it, else ``fr-fr``, else the
        default voice if it speaks it, else the first listed.

        Args:
            voice_id: a voice id of :meth:`voices`; empty for the default (the first).

        Raises:
            InvalidArgumentError: no voice has this id (reason UNKNOWN_VOICE); the message names
                some valid ids.
            RuntimeError: the model is not loaded.

        """
        if not self._voices:
            raise RuntimeError(f"speech model {self.spec.name!r} is not loaded")
        key = voice_id.strip().lower()
        if not key:
            return self._voices[0]
        voice = self._voices_by_id.get(key) or self._voice_of_language(key)
        if voice is not None:
            return voice
        named = ", ".join(v.id for v in self._voices[:_VOICES_NAMED])
        more = f" and {len(self._voices) - _VOICES_NAMED} more" if len(self._voices) > _VOICES_NAMED else ""
        raise InvalidArgumentError(
            f"speech model {self.spec.name!r} has no voice {voice_id!r}; its voices: {named}{more}",
            reason=Reason.UNKNOWN_VOICE,
            field="voice",
            voice=voice_id,
            model=self.spec.name,
        )

    def _voice_of_language(self, language: str) -> Voice | None:
        """The voice a bare language subtag (``fr``) names, or None (see :meth:`resolve_voice`)."""
        if "-" in language:
            return None
        speakers = [v for v in self._voices if v.language.lower().split("-")[0] == language]
        for wanted in (language, f"{language}-{language}"):
            match = next((v for v in speakers if v.language.lower() == wanted), None)
            if match is not None:
                return match
        if self._voices[0] in speakers:
            return self._voices[0]
        return speakers[0] if speakers else None

    async def synthesize(
        self, text: str, options: SpeechOptions, audio_format: AudioFormat
    ) -> AsyncIterator[SpeechAudio]:
        """The speech of ``text`` encoded as ``audio_format``, in pieces to concatenate in order.

        Each piece's ``sample_rate`` is the encoded audio's (:attr:`AudioEncoder.output_rate`:
        :attr:`sample_rate`, or 48 kHz for opus).

        The voice, the speed and the text are checked before any work. The text is cut into
        sentences (:func:`~engines.speech.sentences.split_sentences`, at most
        :attr:`max_sentence_chars` each); each is one lane job in the caller's fair turn that
        speaks and encodes it, and its bytes are yielded as soon as the job ends (a codec may
        hold a frame or two back until the next sentence or the end). Closing the iterator
        early (``contextlib.aclosing``) stops after the running sentence and frees the encoder.

        Raises:
            InvalidArgumentError: an unknown voice (UNKNOWN_VOICE), a speed outside [0.25, 4.0],
                or text with nothing to say.

        """
        voice = self.resolve_voice(options.voice)
        speed = options.speed
        if not (math.isfinite(speed) and MIN_SPEED <= speed <= MAX_SPEED):
            raise InvalidArgumentError(
                f"speed must be from {MIN_SPEED} to {MAX_SPEED}, got {speed}", field="speed", speed=speed
            )
        sentences = split_sentences(text, self.max_sentence_chars)
        if not sentences:
            raise InvalidArgumentError("the text to speak is empty", field="input")
        encoder = AudioEncoder(AudioFormat(audio_format), self.sample_rate)
        rate = encoder.output_rate
        finished = False
        try:
            for sentence in sentences:
                data = await take_turn(
                    self.turns,
                    lambda sentence=sentence: self.executor.run(
                        self._speak_and_encode, encoder, sentence, voice, speed
                    ),
                )
                if data:
                    yield SpeechAudio(data, rate)
            tail = await self.executor.run(encoder.finish)
            finished = True
            if tail:
                yield SpeechAudio(tail, rate)
        finally:
            if not finished:
                # Queued behind any job still using the encoder (a cancelled await leaves it running).
                self.executor.submit_detached(encoder.close)

    def _speak_and_encode(self, encoder: AudioEncoder, sentence: str, voice: Voice, speed: float) -> bytes:
        """One sentence's job (blocking, on the lane): speak it and encode its samples."""
        return encoder.encode(self.speak(sentence, voice, speed))
