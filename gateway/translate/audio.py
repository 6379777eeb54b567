"""OpenAI audio bodies ↔ ``Transcribe``/``SynthesizeSpeech`` messages, and transcripts as files.

Transcript shapes follow OpenAI's ``response_format`` values (``json``, ``text``, ``srt``,
``vtt``, ``verbose_json``; https://platform.openai.com/docs/api-reference/audio); SubRip and
WebVTT cues are one segment each (SubRip: ``HH:MM:SS,mmm``; WebVTT, W3C: ``HH:MM:SS.mmm``).
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from typing import Any

from universal_runtime.v1 import speech_pb2

from gateway.schemas.audio import SpeechRequest, TranscriptionForm, TranslationForm

#: English names of the languages OpenAI's ``verbose_json`` spells out (``"language": "english"``);
#: other codes are given as they are.
LANGUAGE_NAMES = {
    "ar": "arabic",
    "de": "german",
    "en": "english",
    "es": "spanish",
    "fr": "french",
    "hi": "hindi",
    "it": "italian",
    "ja": "japanese",
    "ko": "korean",
    "nl": "dutch",
    "pl": "polish",
    "pt": "portuguese",
    "ru": "russian",
    "sv": "swedish",
    "tr": "turkish",
    "uk": "ukrainian",
    "zh": "chinese",
}

SPEECH_FORMATS = {
    "wav": speech_pb2.AUDIO_FORMAT_WAV,
    "mp3": speech_pb2.AUDIO_FORMAT_MP3,
    "opus": speech_pb2.AUDIO_FORMAT_OPUS,
    "flac": speech_pb2.AUDIO_FORMAT_FLAC,
    "aac": speech_pb2.AUDIO_FORMAT_AAC,
    "pcm": speech_pb2.AUDIO_FORMAT_PCM,
}
"""``response_format`` of ``/v1/audio/speech`` → the contract's ``AudioFormat``."""


def transcribe_options(form: TranslationForm, *, translate: bool) -> speech_pb2.TranscribeOptions:
    """The options of a transcription (``TranscriptionForm``) or translation (``TranslationForm``)."""
    words = isinstance(form, TranscriptionForm) and "word" in form.timestamp_granularities
    return speech_pb2.TranscribeOptions(
        model=form.model,
        language=form.language if isinstance(form, TranscriptionForm) else "",
        prompt=form.prompt,
        temperature=form.temperature,
        translate=translate,
        word_timestamps=words and form.response_format == "verbose_json",
        keep_alive=form.keep_alive_value,
    )


def _transcript_text(segments: Iterable[speech_pb2.TranscriptSegment]) -> str:
    return " ".join(text for s in segments if (text := s.text.strip()))


def _clock(seconds: float, separator: str) -> str:
    """``HH:MM:SS<separator>mmm`` for a time in seconds (SubRip uses ``,``, WebVTT ``.``)."""
    millis = max(0, round(seconds * 1000))
    hours, rest = divmod(millis, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs, millis = divmod(rest, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{separator}{millis:03d}"


def srt(segments: list[speech_pb2.TranscriptSegment]) -> str:
    """The segments as a SubRip file: numbered cues, one per segment."""
    cues = [
        f"{i}\n{_clock(s.start, ',')} --> {_clock(s.end, ',')}\n{s.text.strip()}\n"
        for i, s in enumerate(segments, start=1)
    ]
    return "\n".join(cues)


def vtt(segments: list[speech_pb2.TranscriptSegment]) -> str:
    """The segments as a WebVTT file: the header, then one cue per segment."""
    cues = [f"{_clock(s.start, '.')} --> {_clock(s.end, '.')}\n{s.text.strip()}\n" for s in segments]
    return "\n".join(["WEBVTT\n", *cues])


def _usage(info: speech_pb2.TranscriptionInfo) -> dict[str, Any]:
    """OpenAI's usage of a transcription billed by duration (whole seconds, rounded up)."""
    return {"type": "duration", "seconds": -(-int(info.duration_seconds * 1000) // 1000)}


def verbose_json(
    info: speech_pb2.TranscriptionInfo,
    segments: list[speech_pb2.TranscriptSegment],
    *,
    task: str,
    words: bool,
    temperature: float,
) -> dict[str, Any]:
    """OpenAI's ``verbose_json`` transcription: task, language, duration, text, segments (and words)."""
    body: dict[str, Any] = {
        "task": task,
        "language": LANGUAGE_NAMES.get(info.language, info.language),
        "duration": info.duration_seconds,
        "text": _transcript_text(segments),
        "segments": [
            {
                "id": s.id,
                "seek": 0,
                "start": s.start,
                "end": s.end,
                "text": s.text,
                "tokens": [],
                "temperature": temperature,
                "avg_logprob": s.avg_logprob,
                "compression_ratio": 0.0,
                "no_speech_prob": s.no_speech_prob,
            }
            for s in segments
        ],
        "usage": _usage(info),
    }
    if words:
        body["words"] = [
            {"word": w.word, "start": w.start, "end": w.end, "probability": w.probability}
            for s in segments
            for w in s.words
        ]
    return body


def transcript(
    form: TranslationForm, answers: list[speech_pb2.TranscribeResponse], *, task: str
) -> tuple[dict[str, Any] | str, str]:
    """The answer of a non-streamed transcription: ``(JSON body or text, media type)``.

    ``answers`` are the call's messages: the info first, then the segments.
    """
    info = next((a.info for a in answers if a.HasField("info")), speech_pb2.TranscriptionInfo())
    segments = [a.segment for a in answers if a.HasField("segment")]
    match form.response_format:
        case "text":
            return _transcript_text(segments) + "\n", "text/plain; charset=utf-8"
        case "srt":
            return srt(segments), "application/x-subrip; charset=utf-8"
        case "vtt":
            return vtt(segments), "text/vtt; charset=utf-8"
        case "verbose_json":
            words = isinstance(form, TranscriptionForm) and "word" in form.timestamp_granularities
            return verbose_json(
                info, segments, task=task, words=words, temperature=form.temperature
            ), "application/json"
        case _:
            return {"text": _transcript_text(segments), "usage": _usage(info)}, "application/json"


class TranscriptStream:
    """A streamed transcription as OpenAI's events: ``transcript.text.delta`` per segment, then ``.done``.

    Implements :class:`gateway.streaming.StreamTranslator` over ``TranscribeResponse`` messages.
    """

    def __init__(self) -> None:
        self._info = speech_pb2.TranscriptionInfo()
        self._texts: list[str] = []

    def on_message(self, message: speech_pb2.TranscribeResponse) -> list[dict[str, Any]]:
        """Nothing for the info; one delta event for a segment with text."""
        if message.HasField("info"):
            self._info = message.info
            return []
        text = message.segment.text.strip()
        if not text:
            return []
        delta = text if not self._texts else " " + text
        self._texts.append(text)
        return [{"type": "transcript.text.delta", "delta": delta}]

    def on_end(self) -> list[dict[str, Any]]:
        """The done event with the whole text and the usage."""
        return [{"type": "transcript.text.done", "text": " ".join(self._texts), "usage": _usage(self._info)}]


def speech_request(body: SpeechRequest) -> speech_pb2.SynthesizeSpeechRequest:
    """The ``SynthesizeSpeech`` request of a ``/v1/audio/speech`` body."""
    return speech_pb2.SynthesizeSpeechRequest(
        model=body.model,
        input=body.input,
        voice=body.voice,
        response_format=SPEECH_FORMATS[body.response_format],
        speed=body.speed,
        instructions=body.instructions,
        keep_alive=body.keep_alive_value,
    )


class SpeechStream:
    """Streamed speech as OpenAI's events: ``speech.audio.delta`` (base64 audio) each piece, then ``.done``.

    Implements :class:`gateway.streaming.StreamTranslator` over ``SynthesizeSpeechResponse``
    messages. The done event has no ``usage``: the models are not billed by tokens.
    """

    def on_message(self, message: speech_pb2.SynthesizeSpeechResponse) -> list[dict[str, Any]]:
        """One delta event per piece of audio."""
        return [{"type": "speech.audio.delta", "audio": base64.b64encode(message.audio).decode("ascii")}]

    def on_end(self) -> list[dict[str, Any]]:
        """The done event."""
        return [{"type": "speech.audio.done"}]


def voices_body(model: str, answer: speech_pb2.ListVoicesResponse) -> dict[str, Any]:
    """``{"object": "list", "model", "data": [{"id", "name", "language", "gender"}]}``."""
    return {
        "object": "list",
        "model": model,
        "data": [
            {"id": v.id, "name": v.name, "language": v.language, "gender": v.gender} for v in answer.voices
        ],
    }
