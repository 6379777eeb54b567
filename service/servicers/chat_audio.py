"""Audio parts of chat messages: each replaced by its transcript before the request is converted.

OpenAI's ``input_audio`` content parts (``ChatMessage.content_parts``) are heard by the server's
speech-to-text model (``transcribe_default_model``), as LlamaFarm's runtime does; the message's
parts, text and transcripts, are then joined with newlines into its ``content``, so the
generation engines see text only. Bounds: each part is held to the audio limits of Transcribe
(``audio_max_bytes``, ``audio_max_seconds``), and all of them to the request's byte limit
(``max_text_request_bytes``); parts are transcribed one after another.
"""

from __future__ import annotations

from typing import TypeVar

from universal_runtime.v1 import generation_pb2, speech_pb2

from service.convert import speech
from service.convert.validation import require
from service.settings import Settings
from service.tasks.speech import SpeechTask

Request = TypeVar("Request", generation_pb2.GenerateRequest, generation_pb2.GenerateStreamRequest)


async def with_transcripts(request: Request, task: SpeechTask, settings: Settings) -> Request:
    """``request`` with each message's content parts joined into its content, audio transcribed.

    The request itself is returned when no message has parts.

    Raises:
        InvalidArgumentError: a message with both content and content parts, an empty part list
            entry, audio that cannot be decoded (UNSUPPORTED_FORMAT, EMPTY_FILE).
        ResourceExhaustedError: audio over the Transcribe limits (FILE_TOO_LARGE, AUDIO_TOO_LONG).
        Errors of the speech-to-text model's acquire (MODEL_NOT_FOUND when there is none).

    """
    if not any(message.content_parts for message in request.messages):
        return request
    job = speech.transcription_job(speech_pb2.TranscribeOptions(), settings)
    joined = type(request)()
    joined.CopyFrom(request)
    for i, message in enumerate(joined.messages):
        if not message.content_parts:
            continue
        require(not message.content, f"messages[{i}].content", "give content or content_parts, not both")
        texts = []
        for j, part in enumerate(message.content_parts):
            kind = part.WhichOneof("part")
            require(kind is not None, f"messages[{i}].content_parts[{j}]", "must hold text or audio")
            if kind == "audio":
                texts.append(await task.transcript(job, part.audio.data))
            else:
                texts.append(part.text)
        message.content = "\n".join(text for text in texts if text)
        del message.content_parts[:]
    return joined
