"""Bodies of OpenAI's audio routes: ``/v1/audio/transcriptions``, ``/translations`` and ``/speech``.

Source: https://platform.openai.com/docs/api-reference/audio. Transcriptions and translations are
multipart forms (the audio as ``file``); speech is JSON.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gateway.schemas.encoder_base import EncoderRequestModel

TranscriptionFormat = Literal["json", "text", "srt", "verbose_json", "vtt"]
SpeechFormat = Literal["mp3", "opus", "aac", "flac", "wav", "pcm"]


class TranslationForm(EncoderRequestModel):
    """Fields of ``POST /v1/audio/translations`` (besides ``file``): speech translated into English.

    Attributes:
        model: speech-to-text model (catalog name); empty uses the server's default.
        prompt: text that comes before the audio (spelling of names); ignored by models that take none.
        response_format: ``json`` (``{"text"}``), ``text``, ``srt``, ``vtt`` or ``verbose_json``
            (segments, language, duration).
        temperature: sampling temperature in [0, 1].

    """

    model: str = ""
    prompt: str = ""
    response_format: TranscriptionFormat = "json"
    temperature: float = Field(0.0, ge=0.0, le=1.0)


class TranscriptionForm(TranslationForm):
    """Fields of ``POST /v1/audio/transcriptions`` (besides ``file``).

    Attributes:
        language: ISO 639-1 code of the speech; empty lets the model detect it.
        timestamp_granularities: ``segment`` and/or ``word`` (``timestamp_granularities[]`` in the
            form); ``word`` adds ``words`` to ``verbose_json``.
        stream: answer as server-sent events (``transcript.text.delta`` per segment, then
            ``transcript.text.done``).

    """

    language: str = ""
    timestamp_granularities: list[Literal["word", "segment"]] = Field(default_factory=lambda: ["segment"])
    stream: bool = False


class SpeechRequest(EncoderRequestModel):
    """Body of ``POST /v1/audio/speech``.

    Attributes:
        model: text-to-speech model (catalog name); empty uses the server's default.
        input: the text to speak (at most the server's ``speech_max_input_chars``).
        voice: a voice of the model (``GET /v1/audio/voices``); empty uses its default.
        response_format: encoding of the audio.
        speed: speaking rate as a multiple of normal, 0.25 to 4.0.
        instructions: style instructions; ignored by models that take none.
        stream_format: ``audio`` (the encoded bytes as they are made) or ``sse``
            (``speech.audio.delta`` events with base64 audio, then ``speech.audio.done``).

    """

    model: str = ""
    input: str = Field(min_length=1)
    voice: str = ""
    response_format: SpeechFormat = "mp3"
    speed: float = Field(1.0, ge=0.25, le=4.0)
    instructions: str = ""
    stream_format: Literal["audio", "sse"] = "audio"
