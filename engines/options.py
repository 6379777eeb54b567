"""Typed catalog options: the ``options:`` mapping of a catalog entry, one pydantic model per backend.

Every engine class names its model in ``Engine.options_model``; the model lists each option the
backend reads with its type, range, default and a one-line description (with the unit), so that:

- a catalog entry is checked once, when the catalog is read (``Engine.check_spec`` at start-up and
  before each load): an unknown key, a wrong type or a value out of range refuses the entry with
  INVALID_MODEL_OPTION naming the option and what is allowed;
- an engine reads ``self.options.<name>`` (typed, defaults filled in), never a raw dict;
- the catalog's JSON Schema and the option tables of docs/models/catalog.md come from the same models
  (``universal-runtime catalog schema``).

The models are frozen and forbid unknown keys, like vLLM's and infinity's typed ``EngineArgs``.
Options whose default depends on the machine (``threads``: every core the process may use) are
``None`` when unset, and the description says what ``None`` means.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    NonNegativeFloat,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_core import core_schema as cs

from engines.errors import InvalidArgumentError, clip_text
from engines.reasons import Reason

OptionsT = TypeVar("OptionsT", bound="EngineOptions")


def _accepts_bool(annotation: Any) -> bool:
    """Whether a field's annotation admits ``bool`` (``bool``, ``bool | None``, ``Any``)."""
    if annotation is bool or annotation is Any:
        return True
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return any(_accepts_bool(arg) for arg in typing.get_args(annotation))
    return False


Fraction = Annotated[float, Field(ge=0, le=1)]
"""A probability, score or threshold, from 0 to 1."""
AtLeastOne = Annotated[int, Field(ge=1)]
"""A count of one or more (threads, sequences, tokens)."""
NonEmptyStr = Annotated[str, Field(min_length=1)]
"""A string that is not empty (a file name, a language name, a key)."""
TorchDtype = Literal["float32", "float16", "bfloat16"]
"""Compute dtypes a torch backend's ``dtype`` option may name (see :func:`engines.device.torch_dtype_for`)."""


LOAD_OVERRIDE_SCHEMA_KEY = "x-load-override"
"""JSON Schema keyword of an option a LoadModel caller may override: its ``at_most`` bound, or true."""


@dataclass(frozen=True, slots=True)
class LoadOverride:
    """Marks an option a LoadModel caller may set over the catalog's (``Annotated`` metadata).

    A client names models, never files: only finite numbers, booleans and enums carry this mark,
    and a number only with a bound for callers. Everything else (a file, folder, source, cache
    directory, draft model, template or head) stays the operator's, set only in the catalog;
    :func:`refuse_operator_options` refuses it from a client, :func:`check_override_bounds` a
    value past ``at_most``.

    Attributes:
        at_most: The largest value a caller may give (the catalog may set more); ``None`` for a
            boolean, an enum, or a number whose type bounds it already.
        threads: The option is a thread count: at most the CPUs the server may use.

    """

    at_most: float | None = None
    threads: bool = False

    def __get_pydantic_json_schema__(
        self, core_schema: cs.CoreSchema, handler: GetJsonSchemaHandler
    ) -> dict[str, Any]:
        """The option's schema with :data:`LOAD_OVERRIDE_SCHEMA_KEY` (its bound for callers, or true)."""
        schema = handler(core_schema)
        bound: Any = "cores" if self.threads else self.at_most
        schema[LOAD_OVERRIDE_SCHEMA_KEY] = True if bound is None else {"at_most": bound}
        return schema


OVERRIDE = LoadOverride()
"""The mark of a boolean, an enum or a number its type already bounds (see :class:`LoadOverride`)."""
THREADS_OVERRIDE = LoadOverride(threads=True)
"""The mark of a thread count: a caller may ask for at most the CPUs the server may use."""
MAX_TOKENS_OVERRIDE = 1 << 20
"""Largest token count (context, pool) a LoadModel caller may ask for: above the longest context
of the common open models; an operator may set more in the catalog."""
MAX_BATCH_OVERRIDE = 1 << 16
"""Largest batch size, in tokens or inputs, a LoadModel caller may ask for."""


def _one_line_descriptions(schema: dict[str, Any]) -> None:
    """JSON Schema hook: descriptions on one line (schema, docs tables) that say what LoadModel may set."""
    for prop in schema.get("properties", {}).values():
        if "description" in prop:
            prop["description"] = " ".join(prop["description"].split())
            override = prop.get(LOAD_OVERRIDE_SCHEMA_KEY)
            if override is not None:
                bound = override["at_most"] if isinstance(override, dict) else None
                limit = ""
                if bound == "cores":
                    limit = ", at most the usable cores"
                elif bound is not None:
                    limit = f", at most {_number(bound)}"
                prop["description"] += f" LoadModel may override it{limit}."


class EngineOptions(BaseModel):
    """Options every backend accepts.

    Subclasses add their backend's options: one annotated attribute each (type and constraints,
    with the reusable :data:`Fraction`, :data:`AtLeastOne`, :data:`NonEmptyStr` or pydantic's
    ``NonNegativeInt``/``NonNegativeFloat``), its default, and a docstring under it that becomes
    its description (the catalog's JSON Schema and the docs' tables) and names its unit.

    Values are validated in pydantic's lax mode (a quoted ``"2048"`` in YAML is the integer 2048),
    except that ``true``/``false`` is never a number and NaN or infinity is never a float.
    """

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        allow_inf_nan=False,
        use_attribute_docstrings=True,
        json_schema_extra=_one_line_descriptions,
    )

    niceness: Annotated[Annotated[int, Field(ge=0, le=19)] | None, OVERRIDE] = None
    """Nice value (0-19) of the model lane's threads; unset: 0, or 10 for OCR and layout models
    (batch work that yields the cores to interactive calls)."""

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        # pydantic's lax mode reads true as 1; in a catalog that is always a mistake.
        name = info.field_name
        if (
            isinstance(value, bool)
            and name is not None
            and not _accepts_bool(cls.model_fields[name].annotation)
        ):
            raise ValueError("true/false is not allowed here")
        return value


class TorchEngineOptions(EngineOptions):
    """Options of backends that compute with torch on their lane."""

    threads: Annotated[AtLeastOne | None, THREADS_OVERRIDE] = None
    """Torch intra-op threads of the model's lane on the CPU; unset: every core the process may use."""


class TorchDtypeOptions(EngineOptions):
    """The ``dtype`` option of backends that load torch weights (combine with :class:`TorchEngineOptions`)."""

    dtype: Annotated[TorchDtype | None, OVERRIDE] = None
    """Torch compute dtype of the weights; unset: bfloat16 on CUDA with bf16 support, else float16
    on CUDA and MPS, float32 on the CPU."""


class QueuedEngineOptions(EngineOptions):
    """Options of backends that queue requests before a device step (generation, encoder batching)."""

    max_queue_wait_s: Annotated[NonNegativeFloat, LoadOverride(at_most=3600)] = 0.0
    """Seconds a request may wait in the model's queue before it fails with QUEUE_WAIT_EXCEEDED; 0: no
    limit (the server's UR_MAX_QUEUE_WAIT_S fills it in when unset)."""


def parse_options(model: type[OptionsT], raw: Mapping[str, Any], *, backend: str) -> OptionsT:
    """Validate a catalog entry's ``options`` mapping against ``model``.

    Args:
        model: the backend's options model (``Engine.options_model``).
        raw: the options as written in the catalog (or given to LoadModel).
        backend: the backend's registry name, for messages.

    Returns:
        The typed options, defaults filled in.

    Raises:
        InvalidArgumentError: reason INVALID_MODEL_OPTION; the message lists every problem (the
            option, what was given and what is allowed; for an unknown key the known options and
            the closest match), metadata ``option`` names the first.

    """
    try:
        return model.model_validate(dict(raw))
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        problems = [_describe(model, error, backend) for error in errors]
        raise InvalidArgumentError(
            "; ".join(problems),
            reason=Reason.INVALID_MODEL_OPTION,
            option=_option_name(errors[0]),
            backend=backend,
        ) from None


def _number(value: float) -> str:
    """``value`` as the docs write it: ``1048576``, ``0.5``."""
    return str(int(value)) if float(value).is_integer() else str(value)


def load_override(model: type[EngineOptions], name: str) -> LoadOverride | None:
    """The :class:`LoadOverride` mark of option ``name`` of ``model``; None when callers may not set it."""
    field = model.model_fields.get(name)
    marks = [mark for mark in field.metadata if isinstance(mark, LoadOverride)] if field else []
    return marks[0] if marks else None


def refuse_operator_options(
    model: type[EngineOptions], overrides: Mapping[str, Any], *, backend: str
) -> None:
    """Refuse LoadModel overrides of options only the catalog sets (run before the options are parsed).

    An option the backend does not know passes here: :func:`parse_options` names it, with the
    closest known one.

    Args:
        model: the backend's options model.
        overrides: the caller's overrides, by option name.
        backend: the backend's registry name, for messages.

    Raises:
        InvalidArgumentError: reason OPTION_NOT_OVERRIDABLE for an option without a
            :class:`LoadOverride` mark (a file, folder, source, template...: the operator's, set in
            the catalog); metadata ``option`` names it, the message lists what a caller may set.

    """
    for name in sorted(overrides):
        if name in model.model_fields and load_override(model, name) is None:
            allowed = sorted(n for n in model.model_fields if load_override(model, n) is not None)
            raise InvalidArgumentError(
                f"option {name!r} of backend {backend} is set by the server's operator in the catalog, "
                f"not by LoadModel; a caller may override: {', '.join(allowed)}",
                reason=Reason.OPTION_NOT_OVERRIDABLE,
                option=name,
                backend=backend,
            )


def check_override_bounds(
    model: type[OptionsT], overrides: Mapping[str, Any], typed: OptionsT, *, backend: str, cores: int
) -> None:
    """Refuse LoadModel overrides past their bound for callers (run after :func:`parse_options`).

    Args:
        model: the backend's options model.
        overrides: the caller's overrides, by option name (each one marked: see
            :func:`refuse_operator_options`).
        typed: the catalog's options with the overrides, typed; its values are the ones compared.
        backend: the backend's registry name, for messages.
        cores: the CPUs the server may use (the bound of a thread count).

    Raises:
        InvalidArgumentError: reason INVALID_MODEL_OPTION, metadata ``option`` naming the first
            value past :attr:`LoadOverride.at_most` (or ``cores`` for a thread count).

    """
    for name in sorted(overrides):
        mark = load_override(model, name)
        value = getattr(typed, name, None)
        bound = None if mark is None else cores if mark.threads else mark.at_most
        if bound is not None and value is not None and value > bound:
            what = f"the {cores} CPUs this server may use" if mark.threads else _number(bound)
            raise InvalidArgumentError(
                f"option {name}: a LoadModel caller may ask for at most {what}, got {_number(value)}",
                reason=Reason.INVALID_MODEL_OPTION,
                option=name,
                backend=backend,
            )


def _option_name(error: Any) -> str:
    """The dotted option an error is about (``task_prompts.generate``), ``options`` for the whole mapping.

    pydantic's ``[key]`` marker of an error in a mapping's key is left out of the path.
    """
    return ".".join(str(part) for part in error["loc"] if part != "[key]") or "options"


def _describe(model: type[EngineOptions], error: Any, backend: str) -> str:
    """One problem of a validation error as a sentence naming the option and what is allowed."""
    name = _option_name(error)
    if error["type"] == "extra_forbidden":
        known = sorted(model.model_fields)
        close = difflib.get_close_matches(name, known, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        return f"unknown option {name!r} for backend {backend}{hint}; known options: {', '.join(known)}"
    message = str(error["msg"]).removeprefix("Value error, ")
    if not error["loc"]:  # a rule between options (a model validator): its message names them
        return f"options: {message}"
    return f"option {name}: {message} (got {clip_text(repr(error['input']))})"
