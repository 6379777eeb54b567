r"""Request bodies: JSON decoded, bounded and validated in one place, off the event loop when large.

Every JSON route of the gateway reads its body through :func:`read_json_body` (FastAPI routes by
their route class, :class:`JsonBodyRoute`; the upload routes through :mod:`gateway.uploads`):

1. decode with orjson, which refuses what is not JSON (RFC 8259): invalid UTF-8, lone UTF-16
   surrogates (``"\\ud800"``, which no UTF-8 string can hold, so protobuf could not take them),
   ``NaN``, more than 1024 levels of nesting;
2. count the keys of every object: an object with more than ``max_object_keys`` keys is refused
   before validation walks it or the unknown-field log names its keys;
3. validate with the route's pydantic model.

Each failure is a 400 in OpenAI's error shape (:mod:`gateway.errors`). The three steps run on the
event loop for a body of at most :data:`INLINE_BODY_BYTES` bytes and in a worker thread above it,
so a large body never holds the loop the gRPC server shares (nor does its translation to
protobuf, placed the same way by :func:`off_loop_for_body`). Decoding (orjson) and validation
(pydantic-core) are native calls that hold the GIL, and so the loop, for their whole work unless
a Python validator runs between: a body of millions of small items (anomaly rows) bounds its long
lists and validates them in steps (:mod:`gateway.schemas.anomaly`).
"""

from __future__ import annotations

import asyncio
import email.message
import json
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import orjson
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import Response

from gateway.dependencies import require_api_key
from gateway.errors import GatewayError
from gateway.settings import DEFAULT_MAX_OBJECT_KEYS

#: Bodies of at most this many bytes are decoded and validated on the event loop; larger ones in
#: a worker thread. At 16 KiB no body holds the loop much longer than the hand-off to a thread
#: would take, and the usual requests (a chat turn, a batch of sentences) stay inline (see
#: docs/architecture/design-notes.md#json-bodies-on-or-off-the-event-loop).
INLINE_BODY_BYTES = 16 * 1024


Model = TypeVar("Model", bound=BaseModel)
Result = TypeVar("Result")

MAX_JSON_CONTAINERS = 1 << 18
"""Most ``[`` and ``{`` characters (strings included) of a body that is decoded. orjson builds every
array and object, and what they hold, while it holds the GIL, and freeing them holds it again, so a
worker thread decoding 16 MB of small containers would hold the event loop for the whole decode (see
docs/architecture/design-notes.md#json-bodies-on-or-off-the-event-loop). The count itself is two
byte scans, far cheaper than the decode. Characters inside strings count too (finding the strings
would cost a scan as long as the decode): a body with this many brackets in its text is refused, a
price paid by no usual request."""

INVALID_JSON_CODE = "invalid_json"
"""Error code of a body that is not JSON (bad UTF-8, a lone surrogate, a syntax error)."""


def _json_path(parts: list[str | int]) -> str:
    """Render a path as the ``param`` style of :mod:`gateway.errors`: ``messages[0].content``."""
    path = ""
    for part in parts:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def _lone_surrogate_path(value: Any) -> str | None:
    """Where the first string with a lone surrogate is in ``value`` (keys included), or ``None``."""
    stack: list[tuple[list[str | int], Any]] = [([], value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, str):
            if not item.isascii() and any(0xD800 <= ord(c) <= 0xDFFF for c in item):
                return _json_path(path)
        elif isinstance(item, dict):
            for key, child in item.items():
                if not key.isascii() and any(0xD800 <= ord(c) <= 0xDFFF for c in key):
                    return f"a key of {_json_path(path)}" if path else "a key of the body"
                stack.append(([*path, key], child))
        elif isinstance(item, list):
            stack.extend(([*path, index], child) for index, child in enumerate(item))
    return None


def _not_json(message: str, param: str | None = None) -> GatewayError:
    return GatewayError(400, message, code=INVALID_JSON_CODE, param=param)


def _decode_error(body: bytes, error: orjson.JSONDecodeError) -> GatewayError:
    """The 400 for a body orjson refused: invalid UTF-8, a lone surrogate at a path, or bad JSON."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as bad:
        return _not_json(
            f"Request body is not valid UTF-8: byte {bad.start} (0x{body[bad.start]:02x}) cannot start "
            "or continue a character; JSON text must be UTF-8 (RFC 8259)"
        )
    if "\\u" in text or "\\U" in text:
        # The body is UTF-8: a surrogate can only come from an escape. The standard library accepts
        # lone ones, so it finds where (this parse runs on error paths only).
        try:
            parsed = json.loads(text)
        except (ValueError, RecursionError):
            parsed = None
        path = _lone_surrogate_path(parsed) if parsed is not None else None
        if path is not None:
            return _not_json(
                f"Request body has a lone UTF-16 surrogate (an unpaired \\ud800-\\udfff escape) at {path}: "
                "strings must be valid Unicode",
                param=path,
            )
    return _not_json(f"Request body is not valid JSON: {error}")


def _check_object_sizes(value: Any, max_object_keys: int) -> None:
    """Refuse an object with more than ``max_object_keys`` keys anywhere in ``value``."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if len(item) > max_object_keys:
                raise _not_json(
                    f"Request body has an object of {len(item)} keys; at most {max_object_keys} are "
                    "accepted in one object"
                )
            stack.extend(child for child in item.values() if isinstance(child, dict | list))
        elif isinstance(item, list):
            stack.extend(child for child in item if isinstance(child, dict | list))


def decode_json(body: bytes, *, max_object_keys: int = DEFAULT_MAX_OBJECT_KEYS) -> Any:
    """Decode a JSON body (steps 1 and 2 of the module docstring).

    Raises:
        GatewayError: 400 ``invalid_json``: not UTF-8, a lone surrogate (its path named), not JSON,
            nested over 1024 levels, an object over ``max_object_keys`` keys, or more than
            :data:`MAX_JSON_CONTAINERS` brackets.

    """
    containers = body.count(b"[") + body.count(b"{")
    if containers > MAX_JSON_CONTAINERS:
        raise _not_json(
            f"Request body has {containers} '[' and '{{' characters; at most {MAX_JSON_CONTAINERS} are "
            "accepted (arrays and objects, and those characters inside strings)"
        )
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as error:
        raise _decode_error(body, error) from None
    _check_object_sizes(value, max_object_keys)
    return value


def validate_body(model: type[Model], value: Any) -> Model:
    """Validate decoded JSON with ``model``.

    Raises:
        RequestValidationError: the model refused it; locations start with ``"body"`` as FastAPI's
            own (rendered as 400 by :mod:`gateway.errors`).

    """
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in exc.errors()]) from None


def parse_body(model: type[Model], body: bytes, max_object_keys: int) -> Model:
    """:func:`decode_json` then :func:`validate_body`: a body's bytes as an instance of ``model``."""
    return validate_body(model, decode_json(body, max_object_keys=max_object_keys))


async def off_loop_if_large(size: int, fn: Callable[..., Result], *args: Any) -> Result:
    """``fn(*args)`` on the event loop if ``size`` is at most :data:`INLINE_BODY_BYTES`, else in a thread."""
    if size <= INLINE_BODY_BYTES:
        return fn(*args)
    return await asyncio.to_thread(fn, *args)


async def off_loop_for_body(request: Request, fn: Callable[..., Result], *args: Any) -> Result:
    """``fn(*args)`` where the request's body was parsed: on the event loop or in a worker thread.

    For work in proportion to the body (its translation to protobuf, its answer), so a large
    request's every step stays off the event loop.
    """
    return await off_loop_if_large(len(await request.body()), fn, *args)


def object_key_limit(request: Request) -> int:
    """The app's limit on keys per JSON object (its ``GatewayConfig``), or the default."""
    config = getattr(request.app.state, "config", None)
    return getattr(config, "max_json_object_keys", DEFAULT_MAX_OBJECT_KEYS)


async def read_json_body(request: Request, model: type[Model]) -> Model:
    """Read the request's body and parse it as ``model`` (:func:`parse_body`), in a thread when large.

    Raises:
        GatewayError: 400 ``invalid_json`` (see :func:`decode_json`); 413 from the body size limit.
        RequestValidationError: ``model`` refused the body.

    """
    body = await request.body()
    return await off_loop_if_large(len(body), parse_body, model, body, object_key_limit(request))


def _is_json(content_type: str | None) -> bool:
    """FastAPI's own test of a JSON body: no content type, ``application/json`` or ``+json``."""
    if not content_type:
        return True
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (
        subtype == "json" or subtype.endswith("+json")
    )


class JsonBodyRoute(APIRoute):
    """A route whose JSON body model is parsed by :func:`read_json_body` before FastAPI sees it.

    The API key (:func:`gateway.dependencies.require_api_key`) is checked before the body is read:
    every route of this class needs it when the app has keys.

    FastAPI would decode the body with ``json.loads`` (lone surrogates accepted, invalid UTF-8 a
    vague 400) and validate it, both on the event loop. This route parses it first and hands
    FastAPI the validated model instance as the request's JSON (which Starlette caches), so
    FastAPI's own validation of it is a type check. Routes without a body model are unchanged.
    """

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        """FastAPI's handler, preceded by the parse of the body model when the route has one."""
        handler = super().get_route_handler()
        model = self.body_field.field_info.annotation if self.body_field is not None else None
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return handler

        async def parse_then_handle(request: Request) -> Response:
            # The key first: a request that will be refused is not read, let alone parsed. (Every
            # JSON route of the gateway needs it; FastAPI would check it after parsing the body.)
            await require_api_key(request)
            if _is_json(request.headers.get("content-type")) and await request.body():
                # Starlette's Request.json() returns this cached value; FastAPI validates it again
                # against the same model, which passes an instance through without a second walk.
                request._json = await read_json_body(request, model)
            return await handler(request)

        return parse_then_handle
