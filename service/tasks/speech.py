"""Transcribe, SynthesizeSpeech and ListVoices: one acquire each, the engine's stream passed on."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from engines.capabilities import SpeechSynthesizer, Transcriber
from engines.speech.types import (
    AudioFormat,
    AudioLimits,
    SpeechAudio,
    SpeechOptions,
    TranscriptionEvent,
    TranscriptionOptions,
    TranscriptSegment,
    Voice,
)
from service.model_manager import ModelManager


@dataclass(frozen=True, slots=True)
class TranscriptionJob:
    """A validated Transcribe call: which model, how to transcribe, and the audio's limits."""

    model: str
    keep_alive: str | None
    options: TranscriptionOptions
    limits: AudioLimits


@dataclass(frozen=True, slots=True)
class SpeechJob:
    """A validated SynthesizeSpeech call: which model, what to say, how, and in which encoding."""

    model: str
    keep_alive: str | None
    text: str
    options: SpeechOptions
    audio_format: AudioFormat


class SpeechTask:
    """Speech to text and text to speech.

    Args:
        manager: where speech models are acquired.

    """

    def __init__(self, manager: ModelManager) -> None:
        self._manager = manager

    async def transcribe(self, job: TranscriptionJob, data: bytes) -> AsyncIterator[TranscriptionEvent]:
        """The audio's :class:`~engines.speech.types.TranscriptionInfo`, then each segment in order.

        ``data`` is the encoded audio file, at most ``job.limits.max_bytes`` (the reader bounds it);
        the engine decodes it within ``job.limits`` and recognizes one window of speech per lane
        job.

        Raises:
            InvalidArgumentError: a language the model cannot hear, translation it cannot do,
                empty or undecodable audio.
            ResourceExhaustedError: audio over ``job.limits``.
            Errors of :meth:`ModelManager.acquire`.

        """
        async with self._manager.acquire(job.model, Transcriber, job.keep_alive) as transcriber:
            transcriber.resolve_language(job.options.language)  # refused before any decoding
            async with contextlib.aclosing(transcriber.transcribe(data, job.limits, job.options)) as events:
                async for event in events:
                    yield event

    async def transcript(self, job: TranscriptionJob, data: bytes) -> str:
        """The whole text of ``data``: its segments' texts joined with spaces (see :meth:`transcribe`)."""
        texts = []
        async with contextlib.aclosing(self.transcribe(job, data)) as events:
            async for event in events:
                if isinstance(event, TranscriptSegment) and (text := event.text.strip()):
                    texts.append(text)
        return " ".join(texts)

    async def synthesize(self, job: SpeechJob) -> AsyncIterator[SpeechAudio]:
        """The encoded speech of ``job.text``, in pieces to concatenate, a sentence at a time.

        Raises:
            InvalidArgumentError: an unknown voice (UNKNOWN_VOICE).
            Errors of :meth:`ModelManager.acquire`.

        """
        async with self._manager.acquire(job.model, SpeechSynthesizer, job.keep_alive) as synthesizer:
            pieces = synthesizer.synthesize(job.text, job.options, job.audio_format)
            async with contextlib.aclosing(pieces) as audio:
                async for piece in audio:
                    yield piece

    async def voices(self, model: str) -> tuple[Voice, ...]:
        """The voices of the text-to-speech ``model``, its default first (loads it if needed).

        Raises:
            Errors of :meth:`ModelManager.acquire`.

        """
        async with self._manager.acquire(model, SpeechSynthesizer) as synthesizer:
            return await synthesizer.voices()
