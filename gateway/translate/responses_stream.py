"""OpenAI Responses API streaming: ``GenerateStream`` messages to the typed server-sent events.

Source of the events: https://platform.openai.com/docs/api-reference/responses-streaming and the
openai Python SDK's ``openai.types.responses.response_stream_event``. Each event is sent as
``event: <type>`` plus ``data: <json>`` and carries ``sequence_number`` (0, 1, 2 ... in order).
A stream reads::

    response.created, response.in_progress
    per output item, in the order the model produced them:
      response.output_item.added
      reasoning: content_part.added, reasoning_text.delta..., reasoning_text.done, content_part.done
      message:   content_part.added, output_text.delta..., output_text.done, content_part.done
      function call: function_call_arguments.delta..., function_call_arguments.done
      response.output_item.done
    response.completed (or response.incomplete when cut at max_output_tokens)

A failure after the stream started sends an ``error`` event and then ``response.failed``; no
``[DONE]`` line ends these streams (OpenAI sends none).

The messages are ``CreateResponseStream``'s: the answer's chunks, then, when the request asked to
``store`` it, ``stored`` once the server has kept it; ``response.completed`` goes out only after the
call ended, so a request naming the response right after finds it. A store that fails fails the
call: an ``error`` event and ``response.failed`` instead.
"""

from __future__ import annotations

import json
from typing import Any

from universal_runtime.v1 import generation_pb2, response_store_pb2

from gateway import ids
from gateway.translate.responses import (
    ResponseHeader,
    function_call_item,
    is_cut,
    message_item,
    output_text_part,
    reasoning_item,
    usage_json,
)

# OpenAI's ``response.error.code`` values the gateway's failures fall under (by HTTP status).
_FAILED_CODES: dict[int, str] = {429: "rate_limit_exceeded"}


class _OpenItem:
    """The output item being streamed.

    Its kind (``reasoning``, ``message``, ``function_call``), its JSON, the text gathered so far
    and, for a call, the tool call index it streams.
    """

    def __init__(self, kind: str, item: dict[str, Any], tool_index: int | None = None) -> None:
        self.kind = kind
        self.item = item
        self.text = ""
        self.tool_index = tool_index


class ResponseStreamTranslator:
    """Turns ``CreateResponseStreamResponse`` messages into the Responses API's typed events.

    It is both the stream's translator and its SSE dialect (see
    :class:`gateway.streaming.SseDialect`): events are named by their ``type``, errors become an
    ``error`` event and ``response.failed``, and no ``[DONE]`` follows.

    Args:
        header: The response's id, creation time and request.

    """

    done = None

    def __init__(self, header: ResponseHeader) -> None:
        self._header = header
        self._model = header.request.model
        self._sequence = 0
        self._started = False
        self._open: _OpenItem | None = None
        self._output: list[dict[str, Any]] = []
        self._usage: dict[str, Any] | None = None
        self._cut = False

    # -- SSE dialect ---------------------------------------------------------------------------

    def fields(self, payload: dict[str, Any]) -> dict[str, str]:
        """``event: <type>`` and the payload as compact JSON."""
        return {
            "event": payload["type"],
            "data": json.dumps(payload, separators=(",", ":"), ensure_ascii=False),
        }

    def error_payloads(self, status_code: int, body: dict[str, Any]) -> list[dict[str, Any]]:
        """An ``error`` event (the gateway's ``code``, ``message``, ``param``), then ``response.failed``.

        The failed response's ``error.code`` is one of OpenAI's codes for it (the SDK's
        ``ResponseError`` names a fixed set): ``rate_limit_exceeded`` for a 429, ``invalid_prompt``
        for another 4xx, else ``server_error``; ``type`` carries the gateway's own code.
        """
        error = body["error"]
        events = self._start()
        events.append(
            self._event("error", code=error.get("code"), message=error["message"], param=error.get("param"))
        )
        failed = {
            "code": _FAILED_CODES.get(status_code, "invalid_prompt" if status_code < 500 else "server_error"),
            "message": error["message"],
            "param": error.get("param"),
            "type": error.get("code"),
        }
        events.append(self._event("response.failed", response=self._response("failed", error=failed)))
        return events

    # -- translator ----------------------------------------------------------------------------

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return event

    def _response(self, status: str, *, error: dict[str, Any] | None = None) -> dict[str, Any]:
        output = list(self._output)
        return self._header.response(
            status=status, model=self._model, output=output, usage=self._usage, error=error
        )

    def _start(self) -> list[dict[str, Any]]:
        if self._started:
            return []
        self._started = True
        return [
            self._event("response.created", response=self._response("in_progress")),
            self._event("response.in_progress", response=self._response("in_progress")),
        ]

    def _close(self) -> list[dict[str, Any]]:
        """The events that finish the open item, if any."""
        item, self._open = self._open, None
        if item is None:
            return []
        index = len(self._output)
        status = "incomplete" if self._cut and item.kind != "function_call" else "completed"
        where = {"item_id": item.item["id"], "output_index": index}
        events = []
        if item.kind == "function_call":
            done = function_call_item(
                call_id=item.item["call_id"],
                name=item.item["name"],
                arguments=item.text,
                item_id=item.item["id"],
            )
            events.append(self._event("response.function_call_arguments.done", **where, arguments=item.text))
        elif item.kind == "reasoning":
            done = reasoning_item(item.text, item_id=item.item["id"], status=status)
            part = {"type": "reasoning_text", "text": item.text}
            events.append(
                self._event("response.reasoning_text.done", **where, content_index=0, text=item.text)
            )
            events.append(self._event("response.content_part.done", **where, content_index=0, part=part))
        else:
            done = message_item(item.text, item_id=item.item["id"], status=status)
            events.append(
                self._event(
                    "response.output_text.done", **where, content_index=0, text=item.text, logprobs=[]
                )
            )
            events.append(
                self._event(
                    "response.content_part.done", **where, content_index=0, part=output_text_part(item.text)
                )
            )
        events.append(self._event("response.output_item.done", output_index=index, item=done))
        self._output.append(done)
        return events

    def _open_item(
        self, kind: str, tool_call: generation_pb2.ToolCallDelta | None = None
    ) -> list[dict[str, Any]]:
        """Close the open item and open one of ``kind``: its ``output_item.added`` (and first part)."""
        events = self._close()
        index = len(self._output)
        # The ids a stored response renders again (gateway.translate.responses.output_items).
        prefix = {"function_call": "fc", "reasoning": "rs"}.get(kind, "msg")
        item_id = ids.output_item_id(prefix, self._header.id, index)
        if kind == "function_call":
            assert tool_call is not None
            item = function_call_item(
                call_id=tool_call.id or ids.tool_call_id(),
                name=tool_call.name,
                arguments="",
                item_id=item_id,
                status="in_progress",
            )
            self._open = _OpenItem(kind, item, tool_call.index)
            events.append(self._event("response.output_item.added", output_index=index, item=item))
            return events
        if kind == "reasoning":
            item = reasoning_item("", item_id=item_id, status="in_progress")
            item["content"] = []
            part = {"type": "reasoning_text", "text": ""}
        else:
            item = message_item("", item_id=item_id, status="in_progress")
            item["content"] = []
            part = output_text_part("")
        self._open = _OpenItem(kind, item)
        events.append(self._event("response.output_item.added", output_index=index, item=item))
        events.append(
            self._event(
                "response.content_part.added",
                item_id=item["id"],
                output_index=index,
                content_index=0,
                part=part,
            )
        )
        return events

    def _text(self, kind: str, delta: str) -> list[dict[str, Any]]:
        events = [] if self._open is not None and self._open.kind == kind else self._open_item(kind)
        assert self._open is not None
        self._open.text += delta
        name = "response.reasoning_text.delta" if kind == "reasoning" else "response.output_text.delta"
        extra = {} if kind == "reasoning" else {"logprobs": []}
        where = {"item_id": self._open.item["id"], "output_index": len(self._output), "content_index": 0}
        events.append(self._event(name, **where, delta=delta, **extra))
        return events

    def _tool_call(self, call: generation_pb2.ToolCallDelta) -> list[dict[str, Any]]:
        current = self._open
        fresh = current is None or current.kind != "function_call" or current.tool_index != call.index
        events = self._open_item("function_call", call) if fresh else []
        assert self._open is not None
        if call.arguments_json_delta:
            self._open.text += call.arguments_json_delta
            events.append(
                self._event(
                    "response.function_call_arguments.delta",
                    item_id=self._open.item["id"],
                    output_index=len(self._output),
                    delta=call.arguments_json_delta,
                )
            )
        return events

    def on_message(self, event: response_store_pb2.CreateResponseStreamResponse) -> list[dict[str, Any]]:
        """The events of one stream message (only its first choice: Responses has no ``n``).

        ``stored`` adds none: the call's end (:meth:`on_end`) announces the response.
        """
        if not event.HasField("chunk"):
            return self._start()
        message = event.chunk
        if message.model:
            self._model = message.model
        if message.HasField("usage"):
            self._usage = usage_json(message.usage)
        events = self._start()
        if message.index != 0:
            return events
        if message.reasoning_content:
            events += self._text("reasoning", message.reasoning_content)
        if message.text:
            events += self._text("message", message.text)
        for call in message.tool_calls:
            events += self._tool_call(call)
        if message.finish_reason:
            self._cut = is_cut(message.finish_reason)
        return events

    def on_end(self) -> list[dict[str, Any]]:
        """Close the last item, then ``response.completed`` (``response.incomplete`` when cut).

        The call ended, so a response to ``store`` is stored already.
        """
        events = self._start() + self._close()
        if not any(item["type"] in ("message", "function_call") for item in self._output):
            # An answer without text or calls (the model only thought, or said nothing) still has
            # its message, as the non-streamed answer does.
            events += self._open_item("message") + self._close()
        status = "incomplete" if self._cut else "completed"
        events.append(self._event(f"response.{status}", response=self._response(status)))
        return events
