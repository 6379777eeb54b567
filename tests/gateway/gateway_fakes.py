"""In-process fake gRPC server and helpers for the gateway tests (no models, no torch)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import httpx
from fastapi import FastAPI
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from universal_runtime.v1 import (
    common_pb2,
    documents_pb2,
    encoders_pb2,
    generation_pb2,
    inference_service_pb2_grpc,
    model_service_pb2,
    model_service_pb2_grpc,
    ocr_pb2,
    response_store_pb2,
    response_store_pb2_grpc,
    tokenization_pb2,
)

from gateway.https import Https, uvicorn_server


@dataclass
class RpcFailure:
    """A rich gRPC error the fake aborts with: status code, message and an ErrorInfo detail."""

    code: grpc.StatusCode
    message: str
    reason: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)

    def trailing_metadata(self) -> tuple[tuple[str, bytes], ...]:
        if self.reason is None:
            return ()
        status = status_pb2.Status(code=self.code.value[0], message=self.message)
        info = error_details_pb2.ErrorInfo(
            reason=self.reason, domain="universal-runtime", metadata=self.metadata
        )
        status.details.add().Pack(info)
        return (("grpc-status-details-bin", status.SerializeToString()),)


@dataclass
class Received:
    """One call seen by the fake."""

    method: str
    request: Message
    metadata: dict[str, str]


def default_generate_response() -> generation_pb2.GenerateResponse:
    return generation_pb2.GenerateResponse(
        id="gen-1",
        model="fake-llm",
        choices=[
            generation_pb2.GenerateChoice(
                index=0, text="Hello there!", finish_reason=generation_pb2.FINISH_REASON_STOP
            )
        ],
        usage=common_pb2.Usage(prompt_tokens=5, completion_tokens=3, total_tokens=8, cached_prompt_tokens=4),
        timings=common_pb2.Timings(time_to_first_token_ms=1.5, tokens_per_second=100.0, total_ms=30.0),
    )


def default_stream_messages() -> list[generation_pb2.GenerateStreamResponse]:
    texts = ["Hel", "lo", " there!"]
    messages = [
        generation_pb2.GenerateStreamResponse(id="gen-2", model="fake-llm", index=0, text=text)
        for text in texts
    ]
    messages[-1].finish_reason = generation_pb2.FINISH_REASON_STOP
    messages[-1].usage.CopyFrom(
        common_pb2.Usage(prompt_tokens=5, completion_tokens=3, total_tokens=8, cached_prompt_tokens=4)
    )
    return messages


def default_embed_response() -> encoders_pb2.EmbedResponse:
    return encoders_pb2.EmbedResponse(
        model="fake-embedder",
        embeddings=[
            encoders_pb2.Embedding(index=0, values=[0.5, -0.25, 0.125]),
            encoders_pb2.Embedding(index=1, values=[1.0, 0.0, -1.0]),
        ],
        dimensions=3,
        usage=common_pb2.Usage(prompt_tokens=7, total_tokens=7),
    )


def _box(x: float, y: float, width: float, height: float) -> ocr_pb2.BoundingBox:
    return ocr_pb2.BoundingBox(x=x, y=y, width=width, height=height)


def _citation(page: int, text: str) -> documents_pb2.DocumentCitation:
    return documents_pb2.DocumentCitation(page_number=page, box=_box(10, 20, 30, 8), text=text)


def default_analyze_pages() -> list[documents_pb2.AnalyzeDocumentResponse]:
    """Two pages: a title, a paragraph with one OCR line, and a 2x2 table; then a footer."""
    table = documents_pb2.Table(
        row_count=2,
        column_count=2,
        cells=[
            documents_pb2.TableCell(
                row=row,
                column=column,
                row_span=1,
                column_span=1,
                text=f"r{row}c{column}",
                box=_box(0, 0, 5, 5),
            )
            for row in range(2)
            for column in range(2)
        ],
    )
    line = ocr_pb2.OcrLine(text="Body text.", box=_box(10, 60, 200, 12), confidence=0.5)
    first = documents_pb2.AnalyzeDocumentResponse(
        page_number=1,
        page_count=2,
        width=800,
        height=1000,
        markdown="# Invoice\n\nBody text.",
        ocr_engine="rapidocr",
        layout_engine="rapid_layout",
        blocks=[
            documents_pb2.DocumentBlock(
                type=documents_pb2.BLOCK_TYPE_TITLE,
                text="Invoice",
                box=_box(10, 10, 100, 20),
                confidence=0.75,
            ),
            documents_pb2.DocumentBlock(
                type=documents_pb2.BLOCK_TYPE_TEXT,
                text="Body text.",
                box=_box(10, 60, 200, 12),
                confidence=1.0,
                lines=[line],
            ),
            documents_pb2.DocumentBlock(
                type=documents_pb2.BLOCK_TYPE_TABLE,
                text="r0c0\tr0c1\nr1c0\tr1c1",
                box=_box(10, 100, 300, 50),
                confidence=0.5,
                table=table,
            ),
        ],
    )
    second = documents_pb2.AnalyzeDocumentResponse(
        page_number=2,
        page_count=2,
        width=800,
        height=1000,
        markdown="Page two.",
        ocr_engine="pdf_text_layer",
        layout_engine="rapid_layout",
        blocks=[
            documents_pb2.DocumentBlock(
                type=documents_pb2.BLOCK_TYPE_PAGE_FOOTER,
                text="2",
                box=_box(400, 980, 10, 10),
                confidence=0.25,
            )
        ],
    )
    return [first, second]


def default_ask_response() -> documents_pb2.AskDocumentResponse:
    return documents_pb2.AskDocumentResponse(
        answer="42.00 EUR", score=0.75, citations=[_citation(1, "42.00 EUR")], model="fake-llm"
    )


def default_extract_response() -> documents_pb2.ExtractDocumentResponse:
    return documents_pb2.ExtractDocumentResponse(
        json='{"total": 42.0, "vendor": "ACME", "paid": null}',
        fields=[
            documents_pb2.ExtractedField(
                name="total", value_json="42.0", confidence=1.0, citations=[_citation(1, "42.00")]
            ),
            documents_pb2.ExtractedField(name="vendor", value_json='"ACME"', confidence=0.5),
            documents_pb2.ExtractedField(name="paid", value_json="null", confidence=1.0),
        ],
        model="fake-llm",
    )


def default_classify_response() -> documents_pb2.ClassifyDocumentResponse:
    return documents_pb2.ClassifyDocumentResponse(
        labels=[
            documents_pb2.DocumentClass(label="invoice", score=0.75),
            documents_pb2.DocumentClass(label="letter", score=0.25),
        ],
        model="fake-embedder",
    )


class FakeInferenceService(inference_service_pb2_grpc.InferenceServiceServicer):
    """Canned answers; records every call; can fail, fail mid-stream, or hang until cancelled."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.received: list[Received] = []
        self.fail: RpcFailure | None = None
        self.generate_response = default_generate_response()
        self.stream_messages = default_stream_messages()
        self.stream_fail_after: int | None = None
        self.stream_failure = RpcFailure(grpc.StatusCode.INTERNAL, "engine crashed", "ENGINE_FAILED")
        self.embed_response = default_embed_response()
        self.analyze_pages = default_analyze_pages()
        self.ask_response = default_ask_response()
        self.extract_response = default_extract_response()
        self.classify_response = default_classify_response()
        self.upload_chunks: list[bytes] = []  # chunks of the last upload RPC, in order
        self.hang = False
        self.started = asyncio.Event()
        self.cancelled = asyncio.Event()

    async def _record(self, method: str, request: Message, context: grpc.aio.ServicerContext) -> None:
        metadata = {key: value for key, value in context.invocation_metadata()}
        self.received.append(Received(method, request, metadata))
        self.started.set()
        if self.fail is not None:
            await context.abort(self.fail.code, self.fail.message, self.fail.trailing_metadata())

    async def _hang(self) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise

    async def Generate(self, request, context):
        await self._record("Generate", request, context)
        if self.hang:
            await self._hang()
        return self.generate_response

    async def Tokenize(self, request, context):
        await self._record("Tokenize", request, context)
        return tokenization_pb2.TokenizeResponse(
            model=request.model, token_ids=[1, 2, 3, 4, 5, 6, 7], count=7
        )

    async def GenerateStream(self, request, context):
        await self._record("GenerateStream", request, context)
        for position, message in enumerate(self.stream_messages):
            if self.stream_fail_after == position:
                failure = self.stream_failure
                await context.abort(failure.code, failure.message, failure.trailing_metadata())
            yield message
        if self.hang:
            await self._hang()

    async def _upload(self, method: str, requests: Any, context: grpc.aio.ServicerContext) -> None:
        """Read a whole client stream: its chunks go to ``upload_chunks``, its first message is recorded."""
        messages = [message async for message in requests]
        self.upload_chunks = [message.chunk for message in messages]
        await self._record(method, messages[0], context)
        if self.hang:
            await self._hang()

    async def AnalyzeDocument(self, request_iterator, context):
        await self._upload("AnalyzeDocument", request_iterator, context)
        for page in self.analyze_pages:
            yield page

    async def AskDocument(self, request_iterator, context):
        await self._upload("AskDocument", request_iterator, context)
        return self.ask_response

    async def ExtractDocument(self, request_iterator, context):
        await self._upload("ExtractDocument", request_iterator, context)
        return self.extract_response

    async def ClassifyDocument(self, request_iterator, context):
        await self._upload("ClassifyDocument", request_iterator, context)
        return self.classify_response

    async def Embed(self, request, context):
        await self._record("Embed", request, context)
        if self.hang:
            await self._hang()
        return self.embed_response


def sample_models() -> dict[str, model_service_pb2.Model]:
    return {
        "fake-llm": model_service_pb2.Model(
            name="fake-llm",
            tasks=[model_service_pb2.TASK_GENERATE],
            backend="llama_cpp",
            status=model_service_pb2.MODEL_STATUS_READY,
            status_detail="Ready: loaded",
            device="cpu",
            memory=model_service_pb2.MemoryUsage(ram_bytes=1234, vram_bytes=0),
            loaded_at_unix_ms=1_700_000_000_500,
            kv_cache=model_service_pb2.KvCacheUsage(cells_used=53, cells_total=16384),
        ),
        "org/fake-embedder": model_service_pb2.Model(
            name="org/fake-embedder",
            tasks=[model_service_pb2.TASK_EMBED],
            status=model_service_pb2.MODEL_STATUS_NOT_LOADED,
            device="cuda:0",
        ),
    }


class FakeModelService(model_service_pb2_grpc.ModelServiceServicer):
    """A two-model catalog; GetModel of an unknown name aborts NOT_FOUND / MODEL_NOT_FOUND."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.models = sample_models()
        self.received: list[Received] = []

    async def ListModels(self, request, context):
        self.received.append(Received("ListModels", request, dict(context.invocation_metadata())))
        return model_service_pb2.ListModelsResponse(models=list(self.models.values()))

    async def GetModel(self, request, context):
        self.received.append(Received("GetModel", request, dict(context.invocation_metadata())))
        if request.name not in self.models:
            failure = RpcFailure(
                grpc.StatusCode.NOT_FOUND,
                f"model {request.name!r} is not in the catalog",
                "MODEL_NOT_FOUND",
                {"model": request.name},
            )
            await context.abort(failure.code, failure.message, failure.trailing_metadata())
        return model_service_pb2.GetModelResponse(model=self.models[request.name])


class FakeResponseStore(response_store_pb2_grpc.ResponseStoreServiceServicer):
    """An in-memory ``ResponseStoreService``: stores what it is given; NOT_FOUND for unknown ids.

    ``CreateResponse``/``CreateResponseStream`` do the server's workflow over ``inference`` (the
    fake's Generate/GenerateStream, so ``inference.received`` shows the full conversation sent and
    ``inference.fail`` fails them): the chain of ``previous_response_id`` between the instructions
    and the new messages, tool messages named after their calls, the record stored after the answer
    (for a stream, before the ``stored`` message that ends it). ``conversations`` holds each
    created response's messages, its answer included.

    ``fail`` makes every call abort with that failure (e.g. RESPONSE_TOO_LARGE on a put);
    ``store_fail`` makes a create abort with it when it would store, after the generation (an
    answer that took the response over its bound). ``calls`` names every call made, in order.
    """

    def __init__(self, inference: FakeInferenceService | None = None) -> None:
        self.inference = inference
        self.reset()

    def reset(self) -> None:
        self.stored: dict[str, response_store_pb2.StoredResponse] = {}
        self.conversations: dict[str, list[generation_pb2.ChatMessage]] = {}
        self.fail: RpcFailure | None = None
        self.store_fail: RpcFailure | None = None
        self.calls: list[str] = []

    async def _check(self, context: grpc.aio.ServicerContext, method: str) -> None:
        self.calls.append(method)
        if self.fail is not None:
            await context.abort(self.fail.code, self.fail.message, self.fail.trailing_metadata())

    async def _missing(self, context: grpc.aio.ServicerContext, response_id: str) -> None:
        failure = RpcFailure(
            grpc.StatusCode.NOT_FOUND, f"response '{response_id}' not found", "RESPONSE_NOT_FOUND"
        )
        await context.abort(failure.code, failure.message, failure.trailing_metadata())

    async def PutStoredResponse(self, request, context):
        await self._check(context, "PutStoredResponse")
        stored = response_store_pb2.StoredResponse()
        stored.CopyFrom(request.response)
        stored.expires_at = stored.created_at + 3600
        self.stored[stored.id] = stored
        return response_store_pb2.PutStoredResponseResponse(
            id=stored.id, created_at=stored.created_at, expires_at=stored.expires_at
        )

    async def GetStoredResponse(self, request, context):
        await self._check(context, "GetStoredResponse")
        if request.id not in self.stored:
            await self._missing(context, request.id)
        return response_store_pb2.GetStoredResponseResponse(response=self.stored[request.id])

    async def DeleteStoredResponse(self, request, context):
        await self._check(context, "DeleteStoredResponse")
        if self.stored.pop(request.id, None) is None:
            await self._missing(context, request.id)
        return response_store_pb2.DeleteStoredResponseResponse(id=request.id, deleted=True)

    async def _conversation(self, request, context) -> list[generation_pb2.ChatMessage]:
        """The messages the server generates from: instructions, the chain, the new ones (named)."""
        new = request.response
        chain: list[generation_pb2.ChatMessage] = []
        if new.previous_response_id:
            if new.previous_response_id not in self.conversations:
                await self._missing(context, new.previous_response_id)
            chain = list(self.conversations[new.previous_response_id])
        own = [
            generation_pb2.ChatMessage.FromString(m.SerializeToString()) for m in request.generate.messages
        ]
        names = {call.id: call.name for m in chain for call in m.tool_calls}
        for index, message in enumerate(own):
            names.update((call.id, call.name) for call in message.tool_calls)
            if message.role == generation_pb2.CHAT_ROLE_TOOL and not message.name:
                if message.tool_call_id not in names:
                    failure = RpcFailure(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        f"messages[{index}].tool_call_id answers no tool call",
                        "TOOL_CALL_NOT_FOUND",
                        {"field": f"messages[{index}].tool_call_id", "tool_call_id": message.tool_call_id},
                    )
                    await context.abort(failure.code, failure.message, failure.trailing_metadata())
                message.name = names[message.tool_call_id]
        system = (
            [generation_pb2.ChatMessage(role=generation_pb2.CHAT_ROLE_SYSTEM, content=new.instructions)]
            if new.instructions
            else []
        )
        return [*system, *chain, *own]

    async def _keep(self, request, chain_and_own, answer: generation_pb2.GenerateResponse, context):
        """Store the created response; its ``ResponseStored``."""
        if self.store_fail is not None:
            failure = self.store_fail
            await context.abort(failure.code, failure.message, failure.trailing_metadata())
        new = request.response
        choice = answer.choices[0] if answer.choices else generation_pb2.GenerateChoice()
        reply = generation_pb2.ChatMessage(
            role=generation_pb2.CHAT_ROLE_ASSISTANT,
            content=choice.text,
            reasoning_content=choice.reasoning_content,
            tool_calls=choice.tool_calls,
        )
        without_instructions = chain_and_own[1:] if new.instructions else chain_and_own
        self.conversations[new.id] = [*without_instructions, reply]
        earlier = self.stored[new.previous_response_id].turns if new.previous_response_id else []
        record = response_store_pb2.StoredResponse(
            id=new.id,
            created_at=new.created_at,
            previous_response_id=new.previous_response_id,
            response_json=new.header_json,
            input_items_json=b"[]",
            expires_at=new.created_at + 3600,
            turns=[
                *earlier,
                response_store_pb2.ResponseTurn(
                    response_id=new.id, input_items_json=new.input_items_json, answer=answer
                ),
            ],
        )
        self.stored[new.id] = record
        return response_store_pb2.ResponseStored(
            id=new.id, created_at=new.created_at, expires_at=record.expires_at
        )

    async def CreateResponse(self, request, context):
        await self._check(context, "CreateResponse")
        assert self.inference is not None
        messages = await self._conversation(request, context)
        generate = generation_pb2.GenerateRequest()
        generate.CopyFrom(request.generate)
        del generate.messages[:]
        generate.messages.extend(messages)
        answer = await self.inference.Generate(generate, context)
        reply = response_store_pb2.CreateResponseResponse(answer=answer)
        if request.response.store:
            reply.stored.CopyFrom(await self._keep(request, messages, answer, context))
        return reply

    async def CreateResponseStream(self, request, context):
        await self._check(context, "CreateResponseStream")
        assert self.inference is not None
        messages = await self._conversation(request, context)
        generate = generation_pb2.GenerateStreamRequest()
        generate.CopyFrom(request.generate)
        del generate.messages[:]
        generate.messages.extend(messages)
        choice = generation_pb2.GenerateChoice()
        answer = generation_pb2.GenerateResponse(model=generate.model)
        calls: dict[int, generation_pb2.ToolCall] = {}
        async for chunk in self.inference.GenerateStream(generate, context):
            if chunk.index == 0:
                choice.text += chunk.text
                choice.reasoning_content += chunk.reasoning_content
                for piece in chunk.tool_calls:
                    if piece.index not in calls:
                        calls[piece.index] = choice.tool_calls.add(id=piece.id, name=piece.name)
                    call = calls[piece.index]
                    call.arguments_json += piece.arguments_json_delta
                choice.finish_reason = chunk.finish_reason or choice.finish_reason
            if chunk.HasField("usage"):
                answer.usage.CopyFrom(chunk.usage)
            yield response_store_pb2.CreateResponseStreamResponse(chunk=chunk)
        answer.choices.append(choice)
        if request.response.store:
            stored = await self._keep(request, messages, answer, context)
            yield response_store_pb2.CreateResponseStreamResponse(stored=stored)


@dataclass
class FakeServer:
    """The running fake server: its address and servicers."""

    target: str
    inference: FakeInferenceService
    models: FakeModelService
    health: health.aio.HealthServicer
    responses: FakeResponseStore = field(default_factory=FakeResponseStore)

    async def reset(self) -> None:
        self.inference.reset()
        self.models.reset()
        self.responses.reset()
        await self.health.set("", health_pb2.HealthCheckResponse.SERVING)


@contextlib.asynccontextmanager
async def run_fake_server() -> AsyncIterator[FakeServer]:
    server = grpc.aio.server()
    inference = FakeInferenceService()
    models = FakeModelService()
    health_servicer = health.aio.HealthServicer()
    inference_service_pb2_grpc.add_InferenceServiceServicer_to_server(inference, server)
    model_service_pb2_grpc.add_ModelServiceServicer_to_server(models, server)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    responses = FakeResponseStore(inference)
    response_store_pb2_grpc.add_ResponseStoreServiceServicer_to_server(responses, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    fake = FakeServer(f"127.0.0.1:{port}", inference, models, health_servicer, responses)
    await fake.reset()
    try:
        yield fake
    finally:
        await server.stop(None)


@contextlib.asynccontextmanager
async def asgi_client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client calling the app in-process, with the app's lifespan running."""
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as client,
    ):
        yield client


@contextlib.asynccontextmanager
async def serve_with_uvicorn(app: FastAPI, https: Https | None = None) -> AsyncIterator[str]:
    """Serve the app with uvicorn on a free local port (HTTPS with ``https``); yields its base URL."""
    server = uvicorn_server(app, https, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
    task = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(10):
            while not server.started:
                if task.done():
                    task.result()
                await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"{'http' if https is None else 'https'}://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


def parse_sse(body: str) -> list[Any]:
    """Return the data of each SSE event: parsed JSON, or the raw string (``"[DONE]"``)."""
    events = []
    for block in body.replace("\r\n", "\n").split("\n\n"):
        data_lines = [line[len("data:") :].lstrip() for line in block.split("\n") if line.startswith("data:")]
        if not data_lines:
            continue
        data = "\n".join(data_lines)
        events.append(data if data == "[DONE]" else json.loads(data))
    return events
