"""InferenceService: each RPC converts its request, calls one task, and converts the result."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import KW_ONLY, dataclass
from typing import TypeVar

from google.protobuf.message import Message
from universal_runtime.v1 import (
    anomaly_pb2,
    documents_pb2,
    encoders_pb2,
    generation_pb2,
    images_pb2,
    inference_service_pb2_grpc,
    ocr_pb2,
    speech_pb2,
    tokenization_pb2,
)

from service.convert import anomaly, documents, encoders, generation, images, ocr, speech, tokenization
from service.convert.embedding import embed_response, embedding_request
from service.convert.uploads import read_upload
from service.core.context import CallContext
from service.request_context import note_model, request_id_var
from service.servicers.chat_audio import with_transcripts
from service.settings import Settings
from service.tasks.anomaly import AnomalyStream, AnomalyTask
from service.tasks.classifiers import ClassifierTask
from service.tasks.document_questions import DocumentQuestionTask
from service.tasks.documents import DocumentTask
from service.tasks.encoders import EncoderTask
from service.tasks.generation import GenerationTask
from service.tasks.images import ImageTask
from service.tasks.ocr import OcrTask
from service.tasks.speech import SpeechTask
from service.tasks.tokenization import TokenizationTask

Context = CallContext
EncoderRequest = (
    encoders_pb2.EmbedRequest
    | encoders_pb2.RerankRequest
    | encoders_pb2.ClassifyRequest
    | encoders_pb2.ExtractEntitiesRequest
)
ModelRequest = EncoderRequest | tokenization_pb2.TokenizeRequest | tokenization_pb2.DetokenizeRequest
Job = TypeVar("Job")
Result = TypeVar("Result")

INLINE_REQUEST_BYTES = 16 * 1024
"""Largest serialized request converted on the event loop; larger ones go to a worker thread.
Converting 16 KiB of chat messages costs about what the hop to a thread does (the gateway's
threshold for parsing bodies; see docs/architecture/design-notes.md#json-bodies-on-or-off-the-event-loop)."""


async def _call_inline(fn: Callable[..., Result], *args, **kwargs) -> Result:
    """``fn(*args, **kwargs)`` on the event loop, awaitable like ``asyncio.to_thread``."""
    return fn(*args, **kwargs)


async def convert_request(request: Message, convert: Callable[..., Result], *args, **kwargs) -> Result:
    """``convert(request, *args, **kwargs)``: inline for a small request, in a worker thread for a large one.

    The one placement of the conversions that are linear in their request (chat messages, tools and
    the meta-validation of their JSON Schemas), shared by Generate, GenerateStream, Tokenize and
    Detokenize: a large one never holds the loop every caller shares (see
    docs/architecture/design-notes.md#large-bodies-and-the-event-loop). Large means over
    :data:`INLINE_REQUEST_BYTES` serialized.

    Raises:
        Whatever ``convert`` raises (the converters' InvalidArgumentError).

    """
    run = asyncio.to_thread if request.ByteSize() > INLINE_REQUEST_BYTES else _call_inline
    return await run(convert, request, *args, **kwargs)


@dataclass(eq=False)
class InferenceServicer(inference_service_pb2_grpc.InferenceServiceServicer):
    """Implements ``universal_runtime.v1.InferenceService`` over the tasks.

    Attributes:
        settings: request limits the converters enforce (inputs, tokens, choices, rows, bytes).
        generation, encoders, classifiers, ocr, documents, document_questions, anomaly,
            tokenization, speech, images: the tasks (see :mod:`service.tasks`).

    """

    settings: Settings
    _: KW_ONLY
    generation: GenerationTask
    encoders: EncoderTask
    classifiers: ClassifierTask
    ocr: OcrTask
    documents: DocumentTask
    document_questions: DocumentQuestionTask
    anomaly: AnomalyTask
    tokenization: TokenizationTask
    speech: SpeechTask
    images: ImageTask

    # -- generation -------------------------------------------------------------------------

    async def _generation_request(
        self, request: generation_pb2.GenerateRequest | generation_pb2.GenerateStreamRequest
    ):
        request = await with_transcripts(request, self.speech, self.settings)
        job = await convert_request(
            request,
            generation.generation_request,
            request_id_var.get(),
            max_tokens_limit=self.settings.max_tokens_limit,
            max_choices=self.settings.max_choices,
        )
        note_model(request.model)
        return request.model, request.keep_alive or None, job, generation.choice_count(request)

    async def GenerateStream(
        self, request: generation_pb2.GenerateStreamRequest, context: Context
    ) -> AsyncIterator[generation_pb2.GenerateStreamResponse]:
        """Stream tokens as they are generated; the last message has usage and timings."""
        async for event in self.generation.stream(*await self._generation_request(request)):
            yield generation.stream_response(request.model, event)

    async def Generate(
        self, request: generation_pb2.GenerateRequest, context: Context
    ) -> generation_pb2.GenerateResponse:
        """Generate whole completions and return them at once."""
        completion = await self.generation.complete(*await self._generation_request(request))
        return generation.generate_response(request.model, completion)

    # -- encoders ---------------------------------------------------------------------------

    async def _encoder_call(
        self,
        request: EncoderRequest,
        convert: Callable[..., Job],
        call: Callable[[str, str | None, Job], Awaitable[Result]],
        respond: Callable[[str, Result], Message],
    ) -> Message:
        """The shape of every encoder RPC: convert (``max_batch_inputs`` texts), call, convert back."""
        return await self._model_call(
            request, convert(request, max_inputs=self.settings.max_batch_inputs), call, respond
        )

    @staticmethod
    async def _model_call(
        request: ModelRequest,
        job: Job,
        call: Callable[[str, str | None, Job], Awaitable[Result]],
        respond: Callable[[str, Result], Message],
    ) -> Message:
        """Call a task with a converted request for ``request.model`` (and its keep-alive), convert back."""
        note_model(request.model)
        result = await call(request.model, request.keep_alive or None, job)
        return respond(request.model, result)

    async def Embed(self, request: encoders_pb2.EmbedRequest, context: Context) -> encoders_pb2.EmbedResponse:
        """Embed texts; vectors come back in input order."""
        return await self._encoder_call(request, embedding_request, self.encoders.embed, embed_response)

    async def Rerank(
        self, request: encoders_pb2.RerankRequest, context: Context
    ) -> encoders_pb2.RerankResponse:
        """Rank documents by relevance to the query (cross-encoder or embedding cosine)."""
        return await self._encoder_call(
            request, encoders.rerank_request, self.encoders.rerank, encoders.rerank_response
        )

    async def ExtractEntities(
        self, request: encoders_pb2.ExtractEntitiesRequest, context: Context
    ) -> encoders_pb2.ExtractEntitiesResponse:
        """Find named entities in each input."""
        return await self._encoder_call(
            request, encoders.entity_request, self.encoders.extract_entities, encoders.entities_response
        )

    # -- tokenization -----------------------------------------------------------------------

    async def Tokenize(
        self, request: tokenization_pb2.TokenizeRequest, context: Context
    ) -> tokenization_pb2.TokenizeResponse:
        """Token ids of a prompt, or of chat messages rendered with the model's chat template."""
        job = await convert_request(
            request, tokenization.tokenize_request, max_tokens_limit=self.settings.max_tokens_limit
        )
        return await self._model_call(
            request,
            job,
            self.tokenization.tokenize,
            tokenization.tokenize_response,
        )

    async def Detokenize(
        self, request: tokenization_pb2.DetokenizeRequest, context: Context
    ) -> tokenization_pb2.DetokenizeResponse:
        """The text of token ids."""
        return await self._model_call(
            request,
            await convert_request(request, tokenization.detokenize_request),
            self.tokenization.detokenize,
            tokenization.detokenize_response,
        )

    # -- classifiers ------------------------------------------------------------------------

    async def Classify(
        self, request: encoders_pb2.ClassifyRequest, context: Context
    ) -> encoders_pb2.ClassifyResponse:
        """Classify texts with a catalog classifier, a custom classifier, or zero-shot labels."""
        return await self._encoder_call(
            request, encoders.classification_request, self.classifiers.classify, encoders.classify_response
        )

    async def FitClassifier(
        self, request: encoders_pb2.FitClassifierRequest, context: Context
    ) -> encoders_pb2.FitClassifierResponse:
        """Fit a logistic-regression head on embeddings of the examples, save it and register it."""
        fit = encoders.fit_request(request, max_examples=self.settings.max_batch_inputs)
        info = await self.classifiers.fit(fit)
        return encoders_pb2.FitClassifierResponse(classifier=encoders.classifier_message(info))

    async def ListClassifiers(
        self, request: encoders_pb2.ListClassifiersRequest, context: Context
    ) -> encoders_pb2.ListClassifiersResponse:
        """List the custom classifiers the caller may use (its own and the shared ones), sorted by name."""
        return encoders.classifiers_response(await self.classifiers.list())

    async def DeleteClassifier(
        self, request: encoders_pb2.DeleteClassifierRequest, context: Context
    ) -> encoders_pb2.DeleteClassifierResponse:
        """Delete the caller's own (or with ``shared`` the shared) custom classifier; NOT_FOUND when none."""
        info = await self.classifiers.delete(request.name, shared=request.shared)
        return encoders_pb2.DeleteClassifierResponse(classifier=encoders.classifier_message(info))

    # -- OCR --------------------------------------------------------------------------------

    async def Ocr(
        self, request_iterator: AsyncIterator[ocr_pb2.OcrRequest], context: Context
    ) -> AsyncIterator[ocr_pb2.OcrResponse]:
        """Read text from an image or PDF; one response per page, in page order, as each is done."""
        job, data = await read_upload(
            request_iterator, self.settings, ocr.ocr_job, max_bytes=self.settings.ocr_max_bytes
        )
        note_model(job.model)
        async for page in self.ocr.read(job, data):
            yield ocr.ocr_response(page, job.options.return_boxes)

    # -- speech -----------------------------------------------------------------------------

    async def Transcribe(
        self, request_iterator: AsyncIterator[speech_pb2.TranscribeRequest], context: Context
    ) -> AsyncIterator[speech_pb2.TranscribeResponse]:
        """Transcribe (or translate) an audio file: its info first, then each segment as recognized."""
        job, data = await read_upload(
            request_iterator, self.settings, speech.transcription_job, max_bytes=self.settings.audio_max_bytes
        )
        note_model(job.model)
        async for event in self.speech.transcribe(job, data):
            yield speech.transcribe_response(event)

    async def SynthesizeSpeech(
        self, request: speech_pb2.SynthesizeSpeechRequest, context: Context
    ) -> AsyncIterator[speech_pb2.SynthesizeSpeechResponse]:
        """Speak the input; the encoded audio in pieces, a sentence at a time."""
        job = speech.speech_job(request, self.settings)
        note_model(job.model)
        first = True
        async for piece in self.speech.synthesize(job):
            yield speech.speech_response(piece, job.audio_format, first)
            first = False

    async def ListVoices(
        self, request: speech_pb2.ListVoicesRequest, context: Context
    ) -> speech_pb2.ListVoicesResponse:
        """The voices of a text-to-speech model, its default first."""
        model = request.model or self.settings.speech_default_model
        note_model(model)
        return speech.voices_response(await self.speech.voices(model))

    # -- images -----------------------------------------------------------------------------

    async def GenerateImage(
        self, request: images_pb2.GenerateImageRequest, context: Context
    ) -> AsyncIterator[images_pb2.GenerateImageResponse]:
        """Each image's progress while it denoises, then the image as PNG, for each image in turn."""
        job = images.image_job(request, self.settings)
        note_model(job.model)
        async for event in self.images.generate(job):
            yield images.image_response(event)

    # -- documents --------------------------------------------------------------------------

    async def _document_call(
        self,
        request_iterator: AsyncIterator[Message],
        context: Context,
        convert: Callable[[object, Settings], Job],
        call: Callable[[Job, bytes], Awaitable[Result]],
        respond: Callable[[str, Result], Message],
    ) -> Message:
        """The shape of the unary document RPCs: read the upload into a job, call, convert back."""
        job, data = await read_upload(
            request_iterator, self.settings, convert, max_bytes=self.settings.ocr_max_bytes
        )
        note_model(job.model)
        return respond(job.model, await call(job, data))

    async def AnalyzeDocument(
        self, request_iterator: AsyncIterator[documents_pb2.AnalyzeDocumentRequest], context: Context
    ) -> AsyncIterator[documents_pb2.AnalyzeDocumentResponse]:
        """Structure each page (blocks in reading order, tables, Markdown); one response per page."""
        (job, return_lines), data = await read_upload(
            request_iterator, self.settings, documents.analyze_job, max_bytes=self.settings.ocr_max_bytes
        )
        note_model(job.layout_model)
        async for page in self.documents.analyze(job, data):
            yield documents.analyze_response(page, return_lines)

    async def AskDocument(
        self, request_iterator: AsyncIterator[documents_pb2.AskDocumentRequest], context: Context
    ) -> documents_pb2.AskDocumentResponse:
        """Answer a question about the document, with citations."""
        return await self._document_call(
            request_iterator, context, documents.ask_job, self.document_questions.ask, documents.ask_response
        )

    async def ExtractDocument(
        self, request_iterator: AsyncIterator[documents_pb2.ExtractDocumentRequest], context: Context
    ) -> documents_pb2.ExtractDocumentResponse:
        """Extract typed fields (a JSON Schema in, an object out), each with its source box."""
        return await self._document_call(
            request_iterator,
            context,
            documents.extract_job,
            self.document_questions.extract,
            documents.extract_response,
        )

    async def ClassifyDocument(
        self, request_iterator: AsyncIterator[documents_pb2.ClassifyDocumentRequest], context: Context
    ) -> documents_pb2.ClassifyDocumentResponse:
        """Classify the document (zero-shot over candidate labels, or a document model)."""
        return await self._document_call(
            request_iterator,
            context,
            documents.classify_job,
            self.document_questions.classify,
            documents.classify_response,
        )

    # -- anomaly detection ------------------------------------------------------------------

    async def FitAnomalyDetector(
        self, request: anomaly_pb2.FitAnomalyDetectorRequest, context: Context
    ) -> anomaly_pb2.FitAnomalyDetectorResponse:
        """Fit a detector on the rows and save it as the next version of its name."""
        config = anomaly.fit_config_from_pb(request, max_features=self.settings.anomaly_max_features)
        fitted = await self.anomaly.fit(
            request.detector, config, anomaly.rows_decoder(request, self.settings), shared=request.shared
        )
        return anomaly.fit_response(fitted)

    async def DetectAnomaly(
        self, request: anomaly_pb2.DetectAnomalyRequest, context: Context
    ) -> anomaly_pb2.DetectAnomalyResponse:
        """Score rows against a saved detector, or fit-and-score them when no detector is named."""
        threshold, explain = anomaly.detect_options(request)
        decode = anomaly.rows_decoder(request, self.settings)
        if request.detector:
            result = await self.anomaly.detect(request.detector, decode, threshold=threshold, explain=explain)
        else:
            config = anomaly.fit_config_from_pb(request, max_features=self.settings.anomaly_max_features)
            result = await self.anomaly.detect_once(config, decode, threshold=threshold, explain=explain)
        return anomaly.detect_response(result, columnar=request.columnar_output)

    async def StreamDetectAnomaly(
        self, request_iterator: AsyncIterator[anomaly_pb2.StreamDetectAnomalyRequest], context: Context
    ) -> AsyncIterator[anomaly_pb2.StreamDetectAnomalyResponse]:
        """Score rows as they arrive over a rolling window (one reply per request message)."""
        stream: AnomalyStream | None = None
        try:
            async for request in request_iterator:
                if stream is None:
                    stream = self.anomaly.open_stream(
                        anomaly.stream_config_from_pb(
                            request.config, max_features=self.settings.anomaly_max_features
                        )
                    )
                step = await stream.add(anomaly.rows_decoder(request, self.settings, allow_empty=True))
                yield anomaly.stream_response(step)
        finally:
            if stream is not None:
                await stream.close()

    async def ListAnomalyDetectors(
        self, request: anomaly_pb2.ListAnomalyDetectorsRequest, context: Context
    ) -> anomaly_pb2.ListAnomalyDetectorsResponse:
        """The detectors the caller may use (its own and the shared ones), sorted by name."""
        return anomaly.detectors_response(await self.anomaly.list())

    async def DeleteAnomalyDetector(
        self, request: anomaly_pb2.DeleteAnomalyDetectorRequest, context: Context
    ) -> anomaly_pb2.DeleteAnomalyDetectorResponse:
        """Delete every saved version of the caller's own (or with ``shared`` the shared) detector."""
        count = await self.anomaly.delete(request.detector, shared=request.shared)
        return anomaly_pb2.DeleteAnomalyDetectorResponse(detector=request.detector, versions_deleted=count)
