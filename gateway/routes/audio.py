"""OpenAI's audio routes over ``Transcribe``, ``SynthesizeSpeech`` and ``ListVoices``.

``POST /v1/audio/transcriptions`` and ``/v1/audio/translations`` take a multipart form (the audio
as ``file``, at most the gateway's body limit; the server bounds it again in bytes and seconds)
and answer json, text, srt, vtt or verbose_json, or server-sent events with ``stream``.
``POST /v1/audio/speech`` answers the encoded audio as it is made (or SSE with
``stream_format: "sse"``). ``GET /v1/audio/voices`` lists a speech model's voices.
Source: https://platform.openai.com/docs/api-reference/audio.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Annotated, Any

import grpc
from fastapi import APIRouter, Query
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response, StreamingResponse
from pydantic import ValidationError
from starlette.datastructures import UploadFile
from universal_runtime.v1 import speech_pb2

from gateway.calls import Rpc, RpcContext
from gateway.errors import GatewayError
from gateway.json_body import JsonBodyRoute
from gateway.responses import JsonResponse
from gateway.schemas.audio import SpeechRequest, TranscriptionForm, TranslationForm
from gateway.streaming import TYPED_DATA, call_until_disconnect, keep_rate_limit_headers
from gateway.translate import audio as translate
from gateway.uploads import too_large_as_413, upload_messages

logger = logging.getLogger(__name__)

router = APIRouter(tags=["audio"])
_speech_router = APIRouter(tags=["audio"], route_class=JsonBodyRoute)

MAX_FORM_FIELDS = 32
"""Most fields of a transcription form (OpenAI's have about ten)."""

_FORM_OPENAPI = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    **TranscriptionForm.model_json_schema(),
                    "required": ["file"],
                }
            }
        },
    }
}


async def _read_form(rpc: RpcContext, schema: type[TranslationForm]) -> tuple[bytes, TranslationForm]:
    """The audio file and the form's other fields, validated as ``schema``.

    ``name[]`` fields (``timestamp_granularities[]``) are lists under ``name``.

    Raises:
        GatewayError: 400 ``invalid_file`` for a body that is not a form with a ``file`` part;
            400 for more than :data:`MAX_FORM_FIELDS` fields.
        RequestValidationError: fields the schema refuses (400).

    """
    if not rpc.request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise GatewayError(
            400, "send the audio as multipart/form-data with the file as 'file'", code="invalid_file"
        )
    form = await rpc.request.form(max_files=1, max_fields=MAX_FORM_FIELDS)
    upload = form.get("file")
    if not isinstance(upload, UploadFile):
        raise GatewayError(
            400, "file: attach the audio as the form field 'file'", code="invalid_file", param="file"
        )
    fields: dict[str, Any] = {}
    for name, value in form.multi_items():
        if name == "file":
            continue
        if name.endswith("[]"):
            fields.setdefault(name[:-2], []).append(value)
        else:
            fields[name] = value
    try:
        body = schema.model_validate(fields)
    except ValidationError as exc:
        raise RequestValidationError(exc.errors()) from None
    return await upload.read(), body


async def _transcribe(rpc: RpcContext, schema: type[TranslationForm], *, translate_speech: bool) -> Response:
    data, form = await _read_form(rpc, schema)
    options = translate.transcribe_options(form, translate=translate_speech)
    site = rpc.for_model(form.model)
    messages = upload_messages(speech_pb2.TranscribeRequest, options, data)
    if isinstance(form, TranscriptionForm) and form.stream:
        with too_large_as_413():
            return await site.stream_generation(
                messages, translate.TranscriptStream(), TYPED_DATA, method=site.clients.inference.Transcribe
            )
    with too_large_as_413():
        answers = await site.collect(site.clients.inference.Transcribe, messages)
    body, media_type = translate.transcript(
        form, answers, task="translate" if translate_speech else "transcribe"
    )
    if isinstance(body, str):
        return Response(body, media_type=media_type)
    return JsonResponse(body)


@router.post("/v1/audio/transcriptions", response_model=dict[str, Any], openapi_extra=_FORM_OPENAPI)
async def create_transcription(rpc: Rpc) -> Response:
    """Transcribe speech (OpenAI ``audio.transcriptions.create``).

    Raises:
        GatewayError: 400 for a missing file or bad fields; 413 for audio over the server's limits
            in bytes (``file_too_large``) or seconds (``audio_too_long``).
        grpc.aio.AioRpcError: other server errors (undecodable audio is 400 ``unsupported_format``).

    """
    return await _transcribe(rpc, TranscriptionForm, translate_speech=False)


@router.post("/v1/audio/translations", response_model=dict[str, Any], openapi_extra=_FORM_OPENAPI)
async def create_translation(rpc: Rpc) -> Response:
    """Translate speech into English text (OpenAI ``audio.translations.create``).

    Raises:
        GatewayError, grpc.aio.AioRpcError: as :func:`create_transcription`; a model that cannot
            translate answers 400.

    """
    return await _transcribe(rpc, TranslationForm, translate_speech=True)


async def _audio_bytes(
    call: Any, first: speech_pb2.SynthesizeSpeechResponse | grpc.aio.EOFType
) -> AsyncIterator[bytes]:
    """The audio of a speech call whose first message was read; a failure after it ends the audio short."""
    try:
        message = first
        while message is not grpc.aio.EOF:
            assert isinstance(message, speech_pb2.SynthesizeSpeechResponse)
            yield message.audio
            message = await call.read()
    except grpc.aio.AioRpcError as err:
        # The status (200) and the first audio are sent: the failure can only cut the audio.
        logger.warning("speech stream failed after start: %s", err.code().name)
    finally:
        call.cancel()


@_speech_router.post("/v1/audio/speech", response_class=StreamingResponse)
async def create_speech(body: SpeechRequest, rpc: Rpc) -> Response:
    """Speak the input (OpenAI ``audio.speech.create``): the audio is sent a sentence at a time.

    The first piece is awaited before the response starts, so an unknown model or voice is a
    proper 4xx. ``x-sample-rate`` gives the audio's rate (needed to play ``pcm``).

    Raises:
        GatewayError: 499 when the client left before the first audio.
        grpc.aio.AioRpcError: 404 unknown model, 400 ``unknown_voice``, input over the server's
            limit (``input_too_long``).

    """
    site = rpc.for_model(body.model)
    message = translate.speech_request(body)
    if body.stream_format == "sse":
        return await site.stream_generation(
            message, translate.SpeechStream(), TYPED_DATA, method=site.clients.inference.SynthesizeSpeech
        )
    call = site.clients.inference.SynthesizeSpeech(message, metadata=site.metadata)
    first = await call_until_disconnect(rpc.request, call, call.read())
    await keep_rate_limit_headers(rpc.request, call)
    media_type = "application/octet-stream"
    headers = {}
    if first is not grpc.aio.EOF:
        media_type = first.mime_type or media_type
        headers["x-sample-rate"] = str(first.sample_rate)
    return StreamingResponse(_audio_bytes(call, first), media_type=media_type, headers=headers)


@router.get("/v1/audio/voices", response_model=dict[str, Any])
async def list_voices(rpc: Rpc, model: Annotated[str, Query(max_length=256)] = "") -> JsonResponse:
    """The voices of a text-to-speech model (empty: the server's default), its default first.

    Raises:
        grpc.aio.AioRpcError: 404 for an unknown model, 400 for a model that does not speak.

    """
    answer = await rpc.unary(rpc.clients.inference.ListVoices, speech_pb2.ListVoicesRequest(model=model))
    return JsonResponse(translate.voices_body(model, answer))


router.include_router(_speech_router)
