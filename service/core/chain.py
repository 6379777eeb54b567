"""The admission chain: ordered steps around every call to the core, whatever its face.

Each step (:class:`AdmissionStep`) sees the call's :class:`~service.core.context.CallContext`
and request and calls the next one; the innermost calls the operation. A unary call is awaited
through :meth:`AdmissionStep.unary`, a streamed answer is iterated through
:meth:`AdmissionStep.stream` (an async generator: its admission runs when the face asks for the
first message). The order is code: :func:`build_chain` refuses steps out of :data:`ORDER`, twice,
or without a step they need, so a face cannot, say, count quotas before knowing the key.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, ClassVar

from service.core.context import CallContext

UnaryHandler = Callable[[CallContext, Any], Awaitable[Any]]
"""The operation (or the rest of the chain) of a unary answer: ``(ctx, request) -> response``."""
StreamHandler = Callable[[CallContext, Any], AsyncIterator[Any]]
"""The operation (or the rest of the chain) of a streamed answer: ``(ctx, request) -> messages``."""

ORDER = (
    "request_log",
    "tracing",
    "concurrency",
    "authentication",
    "priority",
    "quota",
    "error_mapping",
)
"""The steps' order, outermost first:

- ``request_log`` first, so every call (refused ones too) has its request id, its log line and
  its metrics;
- ``tracing`` inside it, so the span carries the request id;
- ``concurrency`` before the key check, so a flood of calls is refused without hashing keys;
- ``authentication`` names the caller that ``priority`` (the key's class) and ``quota`` (the
  key's buckets) read;
- ``error_mapping`` innermost, so the steps outside it see one kind of error (a
  :class:`engines.errors.RuntimeServiceError`) and a stream's headers go out after every check."""

REQUIRES: dict[str, tuple[str, ...]] = {"quota": ("authentication",)}
"""Steps that need another step before them in the same chain."""


class AdmissionStep:
    """One step of the chain; the default passes the call on unchanged.

    Subclasses set :attr:`name` (one of :data:`ORDER`) and override :meth:`unary` and
    :meth:`stream`. A step refuses a call by raising a :class:`engines.errors.RuntimeServiceError`.
    """

    name: ClassVar[str] = ""

    async def unary(self, ctx: CallContext, request: Any, call_next: UnaryHandler) -> Any:
        """Admit a unary call and return what ``call_next(ctx, request)`` answers."""
        return await call_next(ctx, request)

    def stream(self, ctx: CallContext, request: Any, call_next: StreamHandler) -> AsyncIterator[Any]:
        """Admit a streamed call and yield what ``call_next(ctx, request)`` yields."""
        return call_next(ctx, request)


class CheckStep(AdmissionStep):
    """A step that only checks or decides before the call runs (:meth:`admit`), then passes it on."""

    def admit(self, ctx: CallContext, request: Any) -> None:
        """Check the call (raise a :class:`engines.errors.RuntimeServiceError` to refuse it)."""

    async def unary(self, ctx: CallContext, request: Any, call_next: UnaryHandler) -> Any:
        """Admit the call (or refuse it) and run it."""
        self.admit(ctx, request)
        return await call_next(ctx, request)

    async def stream(self, ctx: CallContext, request: Any, call_next: StreamHandler) -> AsyncIterator[Any]:
        """Admit the call (or refuse it) and iterate it."""
        self.admit(ctx, request)
        async for item in call_next(ctx, request):
            yield item


class ChainOrderError(ValueError):
    """Steps given to :func:`build_chain` in a wrong order, twice, unknown or missing a step they need."""


class AdmissionChain:
    """Steps in their checked order, run around an operation (use :func:`build_chain`).

    Args:
        steps: The steps, outermost first.

    """

    def __init__(self, steps: Sequence[AdmissionStep]) -> None:
        self.steps = tuple(steps)

    @property
    def names(self) -> tuple[str, ...]:
        """The steps' names, outermost first."""
        return tuple(step.name for step in self.steps)

    def step(self, name: str) -> AdmissionStep | None:
        """The step called ``name``, ``None`` when the chain has none."""
        return next((step for step in self.steps if step.name == name), None)

    async def unary(self, ctx: CallContext, request: Any, operation: UnaryHandler) -> Any:
        """Run ``operation(ctx, request)`` behind every step; returns its answer.

        Raises:
            engines.errors.RuntimeServiceError: A step refused the call or the operation failed
                (anything else is mapped to INTERNAL by the ``error_mapping`` step when present).

        """
        handler = operation
        for step in reversed(self.steps):
            handler = _bind_unary(step, handler)
        return await handler(ctx, request)

    def stream(self, ctx: CallContext, request: Any, operation: StreamHandler) -> AsyncIterator[Any]:
        """Iterate ``operation(ctx, request)`` behind every step (lazily: nothing runs before iteration).

        Raises:
            engines.errors.RuntimeServiceError: While iterating, as :meth:`unary`.

        """
        handler = operation
        for step in reversed(self.steps):
            handler = _bind_stream(step, handler)
        return handler(ctx, request)


def _bind_unary(step: AdmissionStep, call_next: UnaryHandler) -> UnaryHandler:
    async def handler(ctx: CallContext, request: Any) -> Any:
        return await step.unary(ctx, request, call_next)

    return handler


def _bind_stream(step: AdmissionStep, call_next: StreamHandler) -> StreamHandler:
    def handler(ctx: CallContext, request: Any) -> AsyncIterator[Any]:
        return step.stream(ctx, request, call_next)

    return handler


def build_chain(steps: Sequence[AdmissionStep]) -> AdmissionChain:
    """An :class:`AdmissionChain` of ``steps``, checked against :data:`ORDER` and :data:`REQUIRES`.

    Args:
        steps: Outermost first; any subset of :data:`ORDER` in its order.

    Raises:
        ChainOrderError: A step's name is not in :data:`ORDER`, comes twice or after a step that
            :data:`ORDER` puts after it, or a step lacks one that :data:`REQUIRES` names.

    """
    names = [step.name for step in steps]
    for name in names:
        if name not in ORDER:
            raise ChainOrderError(f"unknown admission step {name!r}; the steps are {', '.join(ORDER)}")
    if len(set(names)) != len(names):
        raise ChainOrderError(f"an admission step comes twice: {names}")
    for earlier, later in itertools.pairwise(names):
        if ORDER.index(earlier) > ORDER.index(later):
            raise ChainOrderError(
                f"admission step {later!r} must come before {earlier!r} ({' -> '.join(ORDER)})"
            )
    for name in names:
        for needed in REQUIRES.get(name, ()):
            if needed not in names[: names.index(name)]:
                raise ChainOrderError(f"admission step {name!r} needs {needed!r} before it")
    return AdmissionChain(steps)
