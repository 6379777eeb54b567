"""The checks of a catalog entry before a load, and LoadModel's option overrides over its options.

Whether the entry is usable, and which engine class and device serve it.

None of them reads weights; those that import a backend or read files block, so callers on the event
loop run them in a worker thread.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable, Mapping
from typing import Any

from engines.base import Engine, ModelSpec
from engines.capabilities import CAPABILITY_TASKS, TASKLESS_CAPABILITIES
from engines.device import cpu_threads
from engines.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    RuntimeServiceError,
    TaskNotSupportedError,
)
from engines.options import EngineOptions, check_override_bounds, parse_options, refuse_operator_options
from engines.reasons import Reason
from engines.registry import registered_backends
from service.settings import Settings

# The package's logger: the manager's records keep one logger name whichever module writes them.
log = logging.getLogger("service.model_manager")

# Reasons of failed catalog checks passed on to clients as they are (see EntryChecks.preflight).
PREFLIGHT_REASONS = frozenset(
    {
        Reason.INVALID_CATALOG_ENTRY,
        Reason.UNKNOWN_BACKEND,
        Reason.MODEL_SOURCE_MISSING,
        Reason.MODEL_SOURCE_INVALID,
        Reason.INVALID_MODEL_OPTION,
    }
)

EngineFactory = Callable[[str], type[Engine]]


@functools.cache
def provides(engine_type: type, capability: type) -> bool:
    """Whether ``engine_type`` has the methods of ``capability``, computed once per class.

    The protocols name methods only, which a class cannot lose, so a request's check is a lookup.
    """
    return issubclass(engine_type, capability)


def refuse_task(spec: ModelSpec, capability: type) -> None:
    """Refuse ``capability`` for a model whose catalog entry does not list its task.

    A capability without a task (``Tokenizer``) passes: its engine class decides
    (:func:`refuse_engine`).

    Raises:
        TaskNotSupportedError: the entry does not list the task (metadata ``model``, ``task``).

    """
    task = CAPABILITY_TASKS.get(capability)
    if task is not None and task not in spec.tasks:
        served = ", ".join(t.value for t in spec.tasks)
        raise TaskNotSupportedError(
            f"model {spec.name!r} cannot do {task.value}; it serves: {served}",
            model=spec.name,
            task=task.value,
        )


def refuse_engine(spec: ModelSpec, engine_type: type, capability: type) -> None:
    """Refuse ``capability`` for a model whose engine class lacks it (an operator's catalog mistake).

    Raises:
        TaskNotSupportedError: ``engine_type`` has not the capability's methods.

    """
    if not provides(engine_type, capability):
        task = CAPABILITY_TASKS.get(capability)
        what = task.value if task is not None else TASKLESS_CAPABILITIES[capability]
        raise TaskNotSupportedError(
            f"model {spec.name!r} (backend {spec.backend}) cannot do {what}", model=spec.name, task=what
        )


def options_text(options: Mapping[str, Any]) -> str:
    """Options as ``n_ctx=4096, runtime=torch`` for messages (``none`` when empty)."""
    return ", ".join(f"{key}={value}" for key, value in sorted(options.items())) or "none"


class EntryChecks:
    """The checks of catalog entries, against the backends ``engine_factory`` names.

    Args:
        settings: server settings (the device preference).
        engine_factory: backend name → engine class (the registry; replaceable in tests).
        invalid: malformed catalog entries by name, with why (service.catalog.Catalog.invalid):
            listed, never loadable.

    """

    def __init__(self, settings: Settings, engine_factory: EngineFactory, invalid: Mapping[str, str]) -> None:
        self._settings = settings
        self._engine_factory = engine_factory
        self._invalid = dict(invalid)

    def queues(self, spec: ModelSpec) -> bool:
        """Whether ``spec``'s backend has the ``max_queue_wait_s`` option (a queue before its device)."""
        try:
            options_model = self._engine_factory(spec.backend).options_model
        except RuntimeServiceError:
            return False  # an unknown backend: the entry is refused when used
        return "max_queue_wait_s" in options_model.model_fields

    def refuse_malformed(self, spec: ModelSpec) -> None:
        """Raise FailedPreconditionError (INVALID_CATALOG_ENTRY, with why) for a malformed entry."""
        why = self._invalid.get(spec.name)
        if why is not None:
            raise FailedPreconditionError(why, reason=Reason.INVALID_CATALOG_ENTRY, model=spec.name)

    def with_overrides(
        self, spec: ModelSpec, overrides: Mapping[str, Any]
    ) -> tuple[ModelSpec, EngineOptions]:
        """``spec`` with LoadModel's option overrides over its options, and those options typed (blocking).

        The entry itself is checked first (:meth:`preflight`), so a fault of the catalog stays
        FAILED_PRECONDITION; then the merged options go through the backend's options model, and
        the overrides through its allow-list for callers (:func:`engines.options.refuse_operator_options`:
        bounded numbers, booleans and enums; files, folders and sources stay the catalog's). The
        overrides are kept in their typed form (``4096.0`` from a Struct becomes ``4096``).

        Raises:
            FailedPreconditionError: what :meth:`preflight` raises.
            InvalidArgumentError: reason INVALID_MODEL_OPTION: an override is unknown, of the wrong
                type, out of range or past its bound for callers, or breaks a rule between options;
                reason OPTION_NOT_OVERRIDABLE: an option only the catalog sets (metadata ``option``,
                ``field`` ``options.<name>``).

        """
        cls = self.preflight(spec)
        try:
            refuse_operator_options(cls.options_model, overrides, backend=spec.backend)
            typed = parse_options(cls.options_model, {**spec.options, **overrides}, backend=spec.backend)
            check_override_bounds(
                cls.options_model, overrides, typed, backend=spec.backend, cores=cpu_threads()
            )
        except InvalidArgumentError as exc:
            option = exc.metadata.get("option", "")
            raise InvalidArgumentError(
                exc.message,  # names the option (or "options:" for a rule between them) already
                reason=exc.reason,
                field=f"options.{option}" if option not in ("", "options") else "options",
                option=option,
                backend=spec.backend,
                model=spec.name,
            ) from None
        given = typed.model_dump(mode="json", include=set(overrides))
        return dataclasses.replace(spec, options={**spec.options, **given}), typed

    def engine_class_and_device(self, spec: ModelSpec) -> tuple[type[Engine], str]:
        """The engine class of ``spec`` (:meth:`preflight`) and the device it runs on.

        Raises:
            FailedPreconditionError: what :meth:`preflight` raises, or reason DEVICE_UNAVAILABLE
                for a device this machine lacks.

        """
        cls = self.preflight(spec)
        preference = spec.device if spec.device != "auto" else self._settings.device
        # A model of a backend process: its runtime starts there, never in this process.
        select = (
            cls.select_device_without_runtime if self.in_backend_process(cls, spec) else cls.select_device
        )
        try:
            return cls, select(preference)
        except ValueError as exc:
            raise FailedPreconditionError(
                str(exc), reason=Reason.DEVICE_UNAVAILABLE, model=spec.name
            ) from None

    def in_backend_process(self, cls: type[Engine], spec: ModelSpec) -> bool:
        """Whether ``spec``'s model loads in a backend process (setting ``backend_processes`` on).

        Its class must support it and be the one registered for its backend name: the class the
        backend process builds from that name (a test's stand-in class stays in this process).
        """
        return (
            self._settings.backend_processes
            and cls.runs_in_backend_process
            and registered_backends().get(spec.backend) is cls
        )

    def preflight(self, spec: ModelSpec) -> type[Engine]:
        """The engine class of ``spec`` once its cheap checks pass (:meth:`Engine.check_spec`).

        Raises:
            FailedPreconditionError: a malformed entry (INVALID_CATALOG_ENTRY), an unknown backend
                or a bad entry, with the check's message; reason UNKNOWN_BACKEND,
                MODEL_SOURCE_MISSING, MODEL_SOURCE_INVALID, INVALID_MODEL_OPTION (any invalid
                option) or MODEL_UNAVAILABLE (anything else).

        """
        self.refuse_malformed(spec)
        try:
            cls = self._engine_factory(spec.backend)
            cls.check_spec(spec)
        except RuntimeServiceError as exc:
            # The operator's catalog, not the request, is at fault: no field, not INTERNAL.
            reason = exc.reason
            if reason not in PREFLIGHT_REASONS:
                invalid = isinstance(exc, InvalidArgumentError)
                reason = Reason.INVALID_MODEL_OPTION if invalid else Reason.MODEL_UNAVAILABLE
            raise FailedPreconditionError(exc.message, reason=reason, model=spec.name) from exc
        except Exception as exc:
            # An unexpected failure of a check: its text stays in the log, not in the answer.
            log.warning("catalog entry check failed", exc_info=exc, extra={"model": spec.name})
            raise FailedPreconditionError(
                f"model {spec.name!r} failed its backend's checks ({type(exc).__name__}); see the server log",
                reason=Reason.MODEL_UNAVAILABLE,
                model=spec.name,
            ) from exc
        return cls
