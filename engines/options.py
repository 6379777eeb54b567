"""Typed catalog options: the ``options:`` mapping of a catalog entry, one pydantic model per backend.

Every engine class names its model in ``Engine.options_model``; the model lists each option the
backend reads with its type, range, default and a one-line description (with the unit), so that:

- a catalog entry is checked once, when the catalog is read (``Engine.check_spec`` at start-up and
  before each load): an unknown key, a wrong type or a value out of range refuses the entry with
  INVALID_MODEL_OPTION naming the option and what is allowed;
- an engine reads ``self.options.<name>`` (typed, defaults filled in), never a raw dict;
- the catalog's JSON Schema and the README's option tables come from the same models
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
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from engines.errors import InvalidArgumentError, clip_text

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


def _one_line_descriptions(schema: dict[str, Any]) -> None:
    """JSON Schema hook: an option's description is its docstring on one line (schema and README tables)."""
    for prop in schema.get("properties", {}).values():
        if "description" in prop:
            prop["description"] = " ".join(prop["description"].split())


class EngineOptions(BaseModel):
    """Options every backend accepts.

    Subclasses add their backend's options: one annotated attribute each (type and constraints,
    with the reusable :data:`Fraction`, :data:`AtLeastOne`, :data:`NonEmptyStr` or pydantic's
    ``NonNegativeInt``/``NonNegativeFloat``), its default, and a docstring under it that becomes
    its description (the catalog's JSON Schema and the README's tables) and names its unit.

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

    niceness: Annotated[int, Field(ge=0, le=19)] | None = None
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

    threads: AtLeastOne | None = None
    """Torch intra-op threads of the model's lane on the CPU; unset: every core the process may use."""


class TorchDtypeOptions(EngineOptions):
    """The ``dtype`` option of backends that load torch weights (combine with :class:`TorchEngineOptions`)."""

    dtype: TorchDtype | None = None
    """Torch compute dtype of the weights; unset: bfloat16 on CUDA with bf16 support, else float16
    on CUDA and MPS, float32 on the CPU."""


class QueuedEngineOptions(EngineOptions):
    """Options of backends that queue requests before a device step (generation, encoder batching)."""

    max_queue_wait_s: NonNegativeFloat = 0.0
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
            reason="INVALID_MODEL_OPTION",
            option=_option_name(errors[0]),
            backend=backend,
        ) from None


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
