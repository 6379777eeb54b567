"""The data plane: every operation of the contract, run behind the admission chain.

Operations are the servicers' methods (``service/servicers``: each converts its request, calls a
task and converts the result), taking the request message and the call's
:class:`~service.core.context.CallContext`. The generated ``add_*Servicer_to_server`` functions
register them here (the data plane stands in for the server they expect), so the method table is
the contract's own. Faces call :meth:`DataPlane.unary` or :meth:`DataPlane.stream` with a context
they made; the chain decides the rest.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from engines.errors import RuntimeServiceError
from service.core.chain import AdmissionChain
from service.core.context import CallContext, MethodInfo

PUBLIC_SERVICES = ("/grpc.health.v1.Health/", "/grpc.reflection.")
"""Methods that need no API key (unless ``auth_public_health`` is off) and are never limited."""


@dataclass(frozen=True, slots=True)
class Operation:
    """One registered method: what it is and the function that serves it.

    Attributes:
        info: The method (path, streaming kinds, public).
        behaviour: ``behaviour(request, context)``: the servicer's method; an awaitable answer or
            an async iterator of answers.
        request_deserializer: Parses the request's wire bytes (a face that receives bytes uses it).
        response_serializer: Writes the answer's wire bytes.

    """

    info: MethodInfo
    behaviour: Callable[[Any, Any], Any]
    request_deserializer: Callable[[bytes], Any] | None
    response_serializer: Callable[[Any], bytes] | None


def operations_of(service: str, handlers: Mapping[str, Any]) -> dict[str, Operation]:
    """The :class:`Operation` of each ``grpc.RpcMethodHandler`` in ``handlers`` (method name -> handler).

    Read by attribute only (``request_streaming``, ``unary_unary`` ...), so the core needs no gRPC.
    """
    operations: dict[str, Operation] = {}
    for name, handler in handlers.items():
        path = f"/{service}/{name}"
        behaviour = (
            handler.unary_unary or handler.unary_stream or handler.stream_unary or handler.stream_stream
        )
        info = MethodInfo(
            path,
            request_streaming=handler.request_streaming,
            response_streaming=handler.response_streaming,
            public=path.startswith(PUBLIC_SERVICES),
        )
        operations[path] = Operation(
            info, behaviour, handler.request_deserializer, handler.response_serializer
        )
    return operations


def refused_operation(ctx: CallContext, request: Any) -> Any:
    """The operation of a request refused while parsing (``request`` is the error), or never run."""
    if isinstance(request, RuntimeServiceError):
        error = request
    else:
        error = RuntimeServiceError("the call was refused before its request was read")
    if ctx.method.response_streaming:
        return _raising_stream(error)
    return _raise_async(error)


async def _raise_async(error: Exception) -> Any:
    raise error


async def _raising_stream(error: Exception) -> AsyncIterator[Any]:
    raise error
    yield  # an async generator: the error surfaces when the stream is iterated


def refusing_parse_errors(operation: Callable[[CallContext, Any], Any]) -> Callable[[CallContext, Any], Any]:
    """``operation``, except for a request a face refused while parsing it (the error in its place).

    Such a call still runs the whole admission chain (a wrong key answers UNAUTHENTICATED before
    the parse error), and then raises that error instead of running the operation.
    """

    def run(ctx: CallContext, request: Any) -> Any:
        if isinstance(request, RuntimeServiceError):
            return refused_operation(ctx, request)
        return operation(ctx, request)

    return run


class DataPlane:
    """The contract's operations behind one admission chain (see the module).

    Args:
        chain: The admission chain every call runs through.

    """

    def __init__(self, chain: AdmissionChain) -> None:
        self.chain = chain
        self.operations: dict[str, Operation] = {}

    # -- registration: the generated add_*Servicer_to_server functions call these ------------

    def add_generic_rpc_handlers(self, handlers: Iterable[Any]) -> None:
        """Ignored: the generated code registers the same methods by name as well (below)."""

    def add_registered_method_handlers(self, service: str, handlers: Mapping[str, Any]) -> None:
        """Register ``service``'s methods (``/{service}/{name}``) as operations."""
        self.operations.update(operations_of(service, handlers))

    # -- calls --------------------------------------------------------------------------------

    def method(self, path: str) -> MethodInfo | None:
        """The method at ``path`` (``/universal_runtime.v1.InferenceService/Embed``), ``None`` if unknown."""
        operation = self.operations.get(path)
        return None if operation is None else operation.info

    async def unary(self, ctx: CallContext, request: Any) -> Any:
        """Answer a call of ``ctx.method`` (one answer message) behind the chain.

        ``request`` is the message, or an async iterator of messages for a request stream, or
        the :class:`engines.errors.RuntimeServiceError` a face refused its bytes with
        (:func:`refusing_parse_errors`).

        Raises:
            engines.errors.RuntimeServiceError: Refused by admission or failed (any failure, once
                the chain has an ``error_mapping`` step).
            KeyError: ``ctx.method`` is not an operation of this data plane.

        """
        behaviour = self.operations[ctx.method.path].behaviour
        return await self.chain.unary(ctx, request, _served(behaviour))

    def stream(self, ctx: CallContext, request: Any) -> AsyncIterator[Any]:
        """The answers of a call of ``ctx.method`` (a response stream) behind the chain, lazily.

        Raises:
            engines.errors.RuntimeServiceError: While iterating, as :meth:`unary`.
            KeyError: ``ctx.method`` is not an operation of this data plane.

        """
        behaviour = self.operations[ctx.method.path].behaviour
        return self.chain.stream(ctx, request, _served(behaviour))


def _served(behaviour: Callable[[Any, Any], Any]) -> Callable[[CallContext, Any], Any]:
    """A servicer method (``(request, context)``) as the chain's operation, parse refusals raised."""
    return refusing_parse_errors(lambda ctx, request: behaviour(request, ctx))
