"""Speech engine calls → InferenceService messages, and the backend's answers → engine results.

The inverse of :mod:`service.convert.speech` for what crosses to a backend process (as
:mod:`.wire` is for the text RPCs): ``Transcriber.transcribe`` goes as a ``Transcribe`` call (the
options, then the audio in chunks), ``SpeechSynthesizer.synthesize`` as ``SynthesizeSpeech`` and
``voices`` as ``ListVoices``. Times cross as doubles and probabilities as float32; a transcription
language crosses as its ISO 639-1 code, as the server's converter leaves it.
"""

from __future__ import annotations

from collections.abc import Iterator

from universal_runtime.v1 import speech_pb2

from engines.speech.types import (
    AudioFormat,
    SpeechOptions,
    TranscriptionEvent,
    TranscriptionInfo,
    TranscriptionOptions,
    TranscriptionTask,
    TranscriptSegment,
    TranscriptWord,
    Voice,
)

CHUNK_BYTES = 1024 * 1024
"""Bytes of audio per Transcribe message: far under any gRPC message limit, whatever the file."""

_FORMATS = {member: speech_pb2.AudioFormat.Value(f"AUDIO_FORMAT_{member.name}") for member in AudioFormat}


def transcribe_messages(
    model: str, data: bytes, options: TranscriptionOptions
) -> Iterator[speech_pb2.TranscribeRequest]:
    """A Transcribe call's messages: the options with the first chunk, then :data:`CHUNK_BYTES` chunks."""
    first = speech_pb2.TranscribeOptions(
        model=model,
        language=options.language or "",
        prompt=options.prompt,
        temperature=options.temperature,
        translate=options.task is TranscriptionTask.TRANSLATE,
        word_timestamps=options.word_timestamps,
    )
    yield speech_pb2.TranscribeRequest(options=first, chunk=data[:CHUNK_BYTES])
    for start in range(CHUNK_BYTES, len(data), CHUNK_BYTES):
        yield speech_pb2.TranscribeRequest(chunk=data[start : start + CHUNK_BYTES])


def transcription_event(message: speech_pb2.TranscribeResponse) -> TranscriptionEvent:
    """The engine event of one Transcribe answer: the info, or a segment with its words."""
    if message.HasField("info"):
        return TranscriptionInfo(language=message.info.language, duration_s=message.info.duration_seconds)
    segment = message.segment
    return TranscriptSegment(
        id=segment.id,
        start_s=segment.start,
        end_s=segment.end,
        text=segment.text,
        words=tuple(
            TranscriptWord(word=w.word, start_s=w.start, end_s=w.end, probability=w.probability)
            for w in segment.words
        ),
        avg_logprob=segment.avg_logprob,
        no_speech_prob=segment.no_speech_prob,
    )


def speech_request(
    model: str, text: str, options: SpeechOptions, audio_format: AudioFormat
) -> speech_pb2.SynthesizeSpeechRequest:
    """The SynthesizeSpeech request of one ``SpeechSynthesizer.synthesize`` call."""
    return speech_pb2.SynthesizeSpeechRequest(
        model=model,
        input=text,
        voice=options.voice,
        response_format=_FORMATS[audio_format],
        speed=options.speed,
        instructions=options.instructions,
    )


def voices(message: speech_pb2.ListVoicesResponse) -> tuple[Voice, ...]:
    """The voices of a ListVoices answer, in its order."""
    return tuple(Voice(id=v.id, name=v.name, language=v.language, gender=v.gender) for v in message.voices)
