"""Speech messages ↔ the speech engines' dataclasses (Transcribe, SynthesizeSpeech, ListVoices)."""

from __future__ import annotations

import re

from universal_runtime.v1 import speech_pb2 as pb

from engines.errors import InputTooLongError
from engines.speech.types import (
    AUDIO_MIME_TYPES,
    AudioFormat,
    AudioLimits,
    SpeechAudio,
    SpeechOptions,
    TranscriptionEvent,
    TranscriptionInfo,
    TranscriptionOptions,
    TranscriptionTask,
    TranscriptSegment,
    TranscriptWord,
    Voice,
)
from service.convert.messages import MessageCopy, enum_table
from service.convert.validation import check_range, require
from service.settings import Settings
from service.tasks.speech import SpeechJob, TranscriptionJob

MAX_PROMPT_CHARS = 4096
"""Longest transcription prompt, characters (Whisper reads at most its last 224 tokens)."""
MAX_VOICE_CHARS = 128
"""Longest voice id, characters (ids are short names such as ``en-us``)."""
MAX_INSTRUCTIONS_CHARS = 4096
"""Longest speech style instructions, characters (OpenAI's limit on ``instructions``)."""
# ISO 639-1 (or 639-3) code, optionally with a region: "en", "yue", "en-us", "pt_BR".
_LANGUAGE = re.compile(r"[A-Za-z]{2,3}(?:[-_][A-Za-z0-9]{2,8})?")

AUDIO_FORMATS = enum_table(pb.AudioFormat, "AUDIO_FORMAT_", AudioFormat, unspecified=AudioFormat.MP3)
"""``AudioFormat`` wire value → the engines' encoding; unspecified is mp3, OpenAI's default."""


def transcription_job(options: pb.TranscribeOptions, settings: Settings) -> TranscriptionJob:
    """Validate the options of the first TranscribeRequest; the limits come from ``settings``.

    Raises:
        InvalidArgumentError: a malformed language code, temperature outside [0, 1], a prompt
            over :data:`MAX_PROMPT_CHARS` (INPUT_TOO_LONG).

    """
    language = options.language.strip()
    require(
        not language or _LANGUAGE.fullmatch(language) is not None,
        "options.language",
        f"must be an ISO 639-1 code such as 'en', got {language[:16]!r}",
    )
    check_range(options.temperature, "options.temperature", 0.0, 1.0)
    prompt = options.prompt
    if len(prompt) > MAX_PROMPT_CHARS:
        raise InputTooLongError(
            f"options.prompt: at most {MAX_PROMPT_CHARS} characters, got {len(prompt)}",
            field="options.prompt",
            max_chars=MAX_PROMPT_CHARS,
        )
    return TranscriptionJob(
        model=options.model or settings.transcribe_default_model,
        keep_alive=options.keep_alive or None,
        options=TranscriptionOptions(
            language=language.lower().split("_")[0].split("-")[0] or None,
            prompt=prompt,
            temperature=options.temperature,
            task=TranscriptionTask.TRANSLATE if options.translate else TranscriptionTask.TRANSCRIBE,
            word_timestamps=options.word_timestamps,
        ),
        limits=AudioLimits(max_bytes=settings.audio_max_bytes, max_seconds=settings.audio_max_seconds),
    )


_WORD = MessageCopy(pb.TranscriptWord, TranscriptWord, given=("start", "end"), dropped=("start_s", "end_s"))
_SEGMENT = MessageCopy(
    pb.TranscriptSegment, TranscriptSegment, given=("start", "end", "words"), dropped=("start_s", "end_s")
)
_INFO = MessageCopy(
    pb.TranscriptionInfo, TranscriptionInfo, given=("duration_seconds",), dropped=("duration_s",)
)


def segment_message(segment: TranscriptSegment) -> pb.TranscriptSegment:
    """A segment with its words, times in seconds."""
    return _SEGMENT(
        segment,
        start=segment.start_s,
        end=segment.end_s,
        words=[_WORD(w, start=w.start_s, end=w.end_s) for w in segment.words],
    )


def transcribe_response(event: TranscriptionEvent) -> pb.TranscribeResponse:
    """The message of one transcription event: the info first, then a segment each."""
    if isinstance(event, TranscriptionInfo):
        return pb.TranscribeResponse(info=_INFO(event, duration_seconds=event.duration_s))
    return pb.TranscribeResponse(segment=segment_message(event))


def speech_job(request: pb.SynthesizeSpeechRequest, settings: Settings) -> SpeechJob:
    """Validate a SynthesizeSpeech request (bounded by ``settings.speech_max_input_chars``).

    Raises:
        InvalidArgumentError: empty input, speed outside [0.25, 4.0], an unknown response
            format, a voice id or instructions over their length.
        InputTooLongError: input over ``speech_max_input_chars`` (INPUT_TOO_LONG).

    """
    text = request.input
    require(bool(text.strip()), "input", "must not be empty")
    limit = settings.speech_max_input_chars
    if len(text) > limit:
        raise InputTooLongError(
            f"input: at most {limit} characters per request, got {len(text)} "
            "(setting speech_max_input_chars)",
            field="input",
            max_chars=limit,
        )
    speed = request.speed or 1.0
    check_range(speed, "speed", 0.25, 4.0)
    require(
        request.response_format in AUDIO_FORMATS,
        "response_format",
        f"unknown value {request.response_format}",
    )
    require(len(request.voice) <= MAX_VOICE_CHARS, "voice", f"at most {MAX_VOICE_CHARS} characters")
    require(
        len(request.instructions) <= MAX_INSTRUCTIONS_CHARS,
        "instructions",
        f"at most {MAX_INSTRUCTIONS_CHARS} characters",
    )
    return SpeechJob(
        model=request.model or settings.speech_default_model,
        keep_alive=request.keep_alive or None,
        text=text,
        options=SpeechOptions(voice=request.voice.strip(), speed=speed, instructions=request.instructions),
        audio_format=AUDIO_FORMATS[request.response_format],
    )


def speech_response(
    piece: SpeechAudio, audio_format: AudioFormat, first: bool
) -> pb.SynthesizeSpeechResponse:
    """One piece of encoded speech; the first also carries the sample rate and MIME type."""
    if not first:
        return pb.SynthesizeSpeechResponse(audio=piece.data)
    return pb.SynthesizeSpeechResponse(
        audio=piece.data, sample_rate=piece.sample_rate, mime_type=AUDIO_MIME_TYPES[audio_format]
    )


_VOICE = MessageCopy(pb.Voice, Voice)


def voices_response(voices: tuple[Voice, ...]) -> pb.ListVoicesResponse:
    """The model's voices, in the model's order (default first)."""
    return pb.ListVoicesResponse(voices=[_VOICE(v) for v in voices])
