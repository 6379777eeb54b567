"""JSON bodies of the anomaly routes (``/v1/anomaly/...``); unknown fields are refused (400).

A fit or detect body is up to the gateway's body limit (16 MB in the combined process) of tiny
items, and pydantic validates a list in one call that holds the GIL throughout, so the worker
thread the body is parsed in (:mod:`gateway.json_body`) would hold the event loop with it for
seconds (see docs/architecture/design-notes.md#large-bodies-and-the-event-loop). So the long lists are bounded
before they are walked (:data:`MAX_COLUMNS` fields or cells in a row, :data:`MAX_ROWS` rows: far
above the server's own limits, which it checks) and rows are validated :data:`STEP_CELLS` cells
at a time, giving the GIL back between steps.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, ValidatorFunctionWrapHandler, WrapValidator
from pydantic_core import InitErrorDetails

from gateway.schemas.base import StrictRequestModel

MAX_COLUMNS = 16_384
"""Most fields in ``schema`` and cells in a row the gateway forwards: 16 times the server's
default ``anomaly_max_features`` (1,024), which is the limit a request meets below this ceiling."""
MAX_ROWS = 250_000
"""Most rows the gateway forwards: above the server's default ``anomaly_max_rows`` (200,000), and
within :data:`gateway.json_body.MAX_JSON_CONTAINERS` (each row is an array). Larger batches go
over gRPC as packed rows."""
STEP_CELLS = 16_384
"""Cells of rows validated in one step: a few ms of pydantic, so other work runs between steps."""


def _too_long(loc: tuple[int | str, ...], value: list[Any], max_length: int) -> ValidationError:
    """Pydantic's own ``too_long`` error at ``loc`` (within the field), made without walking ``value``."""
    ctx = {"field_type": "List", "max_length": max_length, "actual_length": len(value)}
    return ValidationError.from_exception_data(
        "list", [InitErrorDetails(type="too_long", loc=loc, input=value, ctx=ctx)]
    )


def _at_most_columns(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """``schema``: refused from its length alone past :data:`MAX_COLUMNS`, else validated as usual."""
    if isinstance(value, list) and len(value) > MAX_COLUMNS:
        raise _too_long((), value, MAX_COLUMNS)
    return handler(value)


def _rows_in_steps(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """``rows`` validated a step of about :data:`STEP_CELLS` cells at a time (see the module docstring).

    The row count and each row's width are checked before any cell; an error's location is the
    cell's in the whole list (``rows[70000][1]``), as one validation would name it.

    Raises:
        ValidationError: more than :data:`MAX_ROWS` rows or :data:`MAX_COLUMNS` cells in a row
            (``too_long``), or pydantic's errors for the first step with a bad row or cell.

    """
    if not isinstance(value, list):
        return handler(value)  # pydantic's own "should be a valid list"
    if len(value) > MAX_ROWS:
        raise _too_long((), value, MAX_ROWS)
    rows: list[list[float | str]] = []
    start = cells = 0
    for end, row in enumerate(value, 1):
        width = len(row) if isinstance(row, list) else 1
        if width > MAX_COLUMNS:
            raise _too_long((end - 1,), row, MAX_COLUMNS)
        cells += width
        if cells >= STEP_CELLS or end == len(value):
            try:
                rows.extend(handler(value[start:end]))
            except ValidationError as exc:
                raise _shifted(exc, start) from None
            start, cells = end, 0
    return rows


def _shifted(exc: ValidationError, offset: int) -> ValidationError:
    """``exc`` of a step that began at row ``offset``, with its locations in the whole list."""
    details = [
        InitErrorDetails(
            type=error["type"],
            loc=(error["loc"][0] + offset, *error["loc"][1:]) if error["loc"] else (),
            input=error["input"],
            **({"ctx": error["ctx"]} if "ctx" in error else {}),
        )
        for error in exc.errors()
    ]
    return ValidationError.from_exception_data(exc.title, details)


Rows = Annotated[list[list[float | str]], WrapValidator(_rows_in_steps)]
"""Rows of numbers and strings, validated in steps (:func:`_rows_in_steps`)."""

Backend = Literal["isolation_forest", "local_outlier_factor", "one_class_svm", "ecod", "hbos", "copod", "knn"]
NormalizationName = Literal["standard", "robust", "none"]


class FeatureFieldBody(StrictRequestModel):
    """One column: ``name``, ``type`` (numeric or categorical) and the categorical ``encoding``."""

    name: str = ""
    type: Literal["numeric", "categorical"] = "numeric"
    encoding: Literal["one_hot", "label", "hash", "frequency"] = "one_hot"


class FitSettings(StrictRequestModel):
    """Fit settings shared by ``fit`` and one-shot ``detect``; unset fields take server defaults.

    Attributes:
        backend: Algorithm (default isolation_forest).
        schema_: Column declarations (JSON key ``schema``); unset means every column numeric.
        contamination: Expected share of anomalies, in (0, 0.5] (default 0.1).
        normalization: Feature scaling (default standard).

    """

    backend: Backend | None = None
    schema_: Annotated[
        list[FeatureFieldBody], Field(max_length=MAX_COLUMNS), WrapValidator(_at_most_columns)
    ] = Field(default_factory=list, alias="schema")
    contamination: float | None = None
    normalization: NormalizationName | None = None


class FitBody(FitSettings):
    """Body of ``POST /v1/anomaly/fit``: a detector name and training ``rows`` (lists of numbers/strings).

    ``shared``: save it in the shared namespace every key may use (an admin key only, else 403);
    by default it is the calling key's own.
    """

    detector: str
    rows: Rows
    shared: bool = False


class DetectBody(FitSettings):
    """Body of ``POST /v1/anomaly/detect``.

    Attributes:
        detector: Saved detector; unset fits on ``rows`` and scores them (one-shot, using the
            fit settings).
        rows: Rows to score.
        threshold: Per-request threshold on the normalized score, in (0, 1].
        explain: Per-feature explanation of flagged rows.

    """

    detector: str = ""
    rows: Rows
    threshold: float | None = None
    explain: bool = False
