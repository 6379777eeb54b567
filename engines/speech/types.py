"""Plain dataclasses of the speech engines (no protobuf here). Times are seconds from the audio's start."""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np


class AudioFormat(enum.StrEnum):
    """Encodings of synthesized speech: OpenAI's ``response_format`` values of ``/v1/audio/speech``.

    ``pcm`` is raw signed 16-bit little-endian mono samples at the model's rate (OpenAI: 24 kHz);
    ``wav`` is the same samples in a RIFF/WAVE container.
    """

    WAV = "wav"
    MP3 = "mp3"
    OPUS = "opus"
    FLAC = "flac"
    AAC = "aac"
    PCM = "pcm"


#: The MIME type of each encoding, as a response's ``Content-Type``.
AUDIO_MIME_TYPES: dict[AudioFormat, str] = {
    AudioFormat.WAV: "audio/wav",
    AudioFormat.MP3: "audio/mpeg",
    AudioFormat.OPUS: "audio/ogg",
    AudioFormat.FLAC: "audio/flac",
    AudioFormat.AAC: "audio/aac",
    AudioFormat.PCM: "audio/pcm",
}


@dataclass(frozen=True, slots=True)
class AudioLimits:
    """Bounds on one uploaded audio file, checked before and while it is decoded.

    Attributes:
        max_bytes: largest encoded file, bytes.
        max_seconds: longest audio, seconds of decoded samples (a header's claim is never
            trusted: decoding stops at the first sample past the bound).

    """

    max_bytes: int
    max_seconds: float


@dataclass(frozen=True, slots=True)
class Audio:
    """Decoded mono audio.

    Attributes:
        samples: float32 samples in [-1, 1], shape (n,).
        sample_rate: samples per second, Hz.

    """

    samples: np.ndarray
    sample_rate: int

    @property
    def duration_s(self) -> float:
        """Length in seconds."""
        return len(self.samples) / self.sample_rate


class TranscriptionTask(enum.StrEnum):
    """What a transcription call asks for: the words as spoken, or translated to English (Whisper)."""

    TRANSCRIBE = "transcribe"
    TRANSLATE = "translate"


@dataclass(frozen=True, slots=True)
class TranscriptionOptions:
    """How to transcribe (OpenAI ``/v1/audio/transcriptions`` fields).

    Attributes:
        language: ISO 639-1 code of the speech, or None to let the model detect it.
        prompt: text that precedes the audio (names, spelling); engines that take no prompt ignore it.
        temperature: sampling temperature in [0, 1]; 0 is greedy.
        task: transcribe, or translate into English.
        word_timestamps: whether segments carry their words with times.

    """

    language: str | None = None
    prompt: str = ""
    temperature: float = 0.0
    task: TranscriptionTask = TranscriptionTask.TRANSCRIBE
    word_timestamps: bool = False


@dataclass(frozen=True, slots=True)
class TranscriptWord:
    """One recognized word and when it was spoken.

    Attributes:
        word: the word's text.
        start_s, end_s: its span, seconds from the audio's start.
        probability: confidence in [0, 1].

    """

    word: str
    start_s: float
    end_s: float
    probability: float = 1.0


@dataclass(frozen=True, slots=True)
class TranscriptSegment:
    """A stretch of speech and its text (OpenAI ``verbose_json`` segment).

    Attributes:
        id: 0-based index in the transcript.
        start_s, end_s: its span, seconds from the audio's start.
        text: what was said.
        words: the words with times, when asked for.
        avg_logprob: mean log probability of its tokens (0 where the engine has none).
        no_speech_prob: probability the span holds no speech (0 where the engine has none).

    """

    id: int
    start_s: float
    end_s: float
    text: str
    words: tuple[TranscriptWord, ...] = ()
    avg_logprob: float = 0.0
    no_speech_prob: float = 0.0


@dataclass(frozen=True, slots=True)
class SpeechWindow:
    """A stretch of audio found to hold speech by voice activity detection.

    Attributes:
        start_s, end_s: its span in the whole audio, seconds.
        samples: its float32 samples (a view of the whole audio's).

    """

    start_s: float
    end_s: float
    samples: np.ndarray


@dataclass(frozen=True, slots=True)
class Voice:
    """A voice a speech model can speak with.

    Attributes:
        id: what a request names (``voice``).
        name: a readable name.
        language: BCP 47 tag of the voice's language (``en-us``).
        gender: ``male``, ``female`` or empty where unknown.

    """

    id: str
    name: str
    language: str
    gender: str = ""


@dataclass(frozen=True, slots=True)
class SpeechOptions:
    """How to speak (OpenAI ``/v1/audio/speech`` fields).

    Attributes:
        voice: a voice id of the model; empty means its default.
        speed: speaking rate as a multiple of normal, in [0.25, 4.0].
        instructions: style instructions; engines that take none ignore them.

    """

    voice: str = ""
    speed: float = 1.0
    instructions: str = ""


@dataclass(frozen=True, slots=True)
class TranscriptionInfo:
    """What a transcription found about the whole audio.

    Attributes:
        language: ISO 639-1 code of the speech (given, detected, or the model's only language).
        duration_s: the audio's length, seconds.

    """

    language: str
    duration_s: float


TranscriptionEvent = TranscriptionInfo | TranscriptSegment
"""What a transcription yields: its :class:`TranscriptionInfo` first, then each segment in order."""


@dataclass(frozen=True, slots=True)
class SpeechAudio:
    """A piece of encoded speech, in order.

    Attributes:
        data: the next bytes of the encoded audio.
        sample_rate: samples per second of the audio, Hz (the same on every piece of a call).

    """

    data: bytes
    sample_rate: int
