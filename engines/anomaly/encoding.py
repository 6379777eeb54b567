"""Rows of numbers and categories → a float matrix, the same way at fit and at detect time.

Encodings of a categorical column (:class:`~engines.anomaly.types.CategoricalEncoding`):

* one-hot: one 0/1 column per category seen at fit time; an unseen category is all zeros;
* label: one column, categories numbered 0, 1, ... in order of first appearance at fit time;
  an unseen category gets the next number;
* hash: ``HASH_BUCKETS`` columns, the category's bucket set to 1; the bucket comes from
  BLAKE2b of the UTF-8 text, so it is the same in every process (Python's ``hash()`` is not);
* frequency: the category's share of the fit rows; an unseen category is 0.

The encoder keeps only lists, dicts, strings and numbers, so it persists with skops and is
loaded through an explicit allow-list (see :mod:`engines.anomaly.store`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from engines.anomaly.types import CategoricalEncoding, Cell, FeatureField, FeatureKind
from engines.errors import InvalidArgumentError

HASH_BUCKETS = 16
"""Columns produced by one hash-encoded categorical feature."""


def default_schema(width: int) -> tuple[FeatureField, ...]:
    """All-numeric schema for rows of ``width`` columns, named ``x0 ... x{width-1}``."""
    return tuple(FeatureField(name=f"x{i}") for i in range(width))


def hash_bucket(value: str, buckets: int = HASH_BUCKETS) -> int:
    """Stable bucket of ``value`` in ``[0, buckets)`` (BLAKE2b, 8-byte digest, little-endian)."""
    digest = hashlib.blake2b(value.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") % buckets


def check_rows(
    rows: Sequence[Sequence[Cell]], schema: Sequence[FeatureField]
) -> list[np.ndarray | list[str]]:
    """Validate ``rows`` against ``schema`` and return them column by column.

    Returns:
        One entry per schema field: a float64 array (numeric) or a list of strings (categorical).

    Raises:
        InvalidArgumentError: no rows, no columns (rows without values, with no schema to give them
            a width), a row of another width, a string in a numeric column or a number in a
            categorical one, or a NaN/infinite number (no imputation is done: the caller decides
            what a missing value means). The metadata names the row and column.

    """
    width = len(schema)
    if isinstance(rows, np.ndarray):
        return _check_matrix(rows, schema)
    if not rows:
        raise InvalidArgumentError("rows: must contain at least one row", field="rows")
    if width == 0:  # the width came from an empty first row: there is nothing to score
        raise InvalidArgumentError(
            "rows[0].values: must contain at least one value (a row needs one column or more)",
            field="rows[0].values",
            row=0,
        )
    for i, row in enumerate(rows):
        if len(row) != width:
            raise InvalidArgumentError(
                f"rows[{i}] has {len(row)} values; expected {width} (all rows must have the schema's width)",
                field=f"rows[{i}]",
                row=i,
                width=len(row),
                expected_width=width,
            )
    columns: list[np.ndarray | list[str]] = []
    for j, feature in enumerate(schema):
        cells = [row[j] for row in rows]
        numeric = feature.kind is FeatureKind.NUMERIC
        for i, cell in enumerate(cells):
            if isinstance(cell, str) == numeric:
                wanted = "a number" if numeric else "a string (categorical)"
                raise InvalidArgumentError(
                    f"rows[{i}].values[{j}] ({feature.name}) must be {wanted}",
                    field=f"rows[{i}].values[{j}]",
                    row=i,
                    column=j,
                    feature=feature.name,
                )
        if not numeric:
            columns.append([str(c) for c in cells])
            continue
        array = np.asarray(cells, dtype=np.float64)
        bad = np.flatnonzero(~np.isfinite(array))
        if bad.size:
            i = int(bad[0])
            raise InvalidArgumentError(
                f"rows[{i}].values[{j}] ({feature.name}) is {cells[i]}: values must be finite "
                "(no NaN or infinity; impute missing values before sending)",
                field=f"rows[{i}].values[{j}]",
                row=i,
                column=j,
                feature=feature.name,
            )
        columns.append(array)
    return columns


def _check_matrix(matrix: np.ndarray, schema: Sequence[FeatureField]) -> list[np.ndarray]:
    """Vectorized :func:`check_rows` for an all-numeric float matrix of shape (rows, columns)."""
    if matrix.ndim != 2 or matrix.shape[0] == 0:
        raise InvalidArgumentError("numeric_rows: must contain at least one row", field="numeric_rows")
    if matrix.shape[1] != len(schema):
        raise InvalidArgumentError(
            f"numeric_rows has {matrix.shape[1]} columns; expected {len(schema)} (the schema's width)",
            field="numeric_rows.column_count",
            width=matrix.shape[1],
            expected_width=len(schema),
        )
    categorical = [f.name for f in schema if f.kind is not FeatureKind.NUMERIC]
    if categorical:
        raise InvalidArgumentError(
            f"numeric_rows cannot carry categorical fields ({', '.join(categorical)}); send rows instead",
            field="numeric_rows",
        )
    # One reduction in the common case; the position of a bad value is searched only on failure.
    if not np.isfinite(matrix).all():
        i, j = (int(v) for v in np.argwhere(~np.isfinite(matrix))[0])
        raise InvalidArgumentError(
            f"numeric_rows row {i} column {j} ({schema[j].name}) is {matrix[i, j]}: values must be finite "
            "(no NaN or infinity; impute missing values before sending)",
            field=f"rows[{i}].values[{j}]",
            row=i,
            column=j,
            feature=schema[j].name,
        )
    return [matrix[:, j] for j in range(matrix.shape[1])]


class TabularEncoder:
    """Encodes rows by a schema; fitted on the training rows, then reused unchanged.

    Args:
        schema: one field per column.

    Attributes:
        output_features: for each output column, the index of the schema field it comes from
            (several for one-hot and hash), used to explain scores per feature.

    """

    def __init__(self, schema: Sequence[FeatureField]) -> None:
        self.names = [f.name for f in schema]
        self.kinds = [str(f.kind) for f in schema]
        self.encodings = [str(f.encoding) for f in schema]
        self.categories: list[list[str]] = [[] for _ in schema]
        self.frequencies: list[dict[str, float]] = [{} for _ in schema]
        self.hash_buckets = HASH_BUCKETS
        self.output_features: list[int] = []

    @property
    def schema(self) -> tuple[FeatureField, ...]:
        """The schema the encoder was built with."""
        return tuple(
            FeatureField(name=n, kind=FeatureKind(k), encoding=CategoricalEncoding(e))
            for n, k, e in zip(self.names, self.kinds, self.encodings, strict=True)
        )

    def _widths(self) -> list[int]:
        widths = []
        for j, kind in enumerate(self.kinds):
            if kind == FeatureKind.NUMERIC:
                widths.append(1)
            elif self.encodings[j] == CategoricalEncoding.ONE_HOT:
                widths.append(max(1, len(self.categories[j])))
            elif self.encodings[j] == CategoricalEncoding.HASH:
                widths.append(self.hash_buckets)
            else:
                widths.append(1)
        return widths

    def fit(self, rows: Sequence[Sequence[Cell]]) -> TabularEncoder:
        """Learn the categories and frequencies of the categorical columns.

        Raises:
            InvalidArgumentError: see :func:`check_rows`.

        """
        columns = check_rows(rows, self.schema)
        for j, column in enumerate(columns):
            if isinstance(column, list):
                counts: dict[str, int] = {}
                for value in column:
                    counts[value] = counts.get(value, 0) + 1
                self.categories[j] = list(counts)  # dicts keep first-appearance order
                self.frequencies[j] = {k: v / len(column) for k, v in counts.items()}
        self.output_features = [j for j, w in enumerate(self._widths()) for _ in range(w)]
        return self

    def transform(self, rows: Sequence[Sequence[Cell]]) -> np.ndarray:
        """Encode ``rows`` into a float64 matrix of shape (len(rows), len(output_features)).

        Raises:
            InvalidArgumentError: see :func:`check_rows`.

        """
        columns = check_rows(rows, self.schema)
        if isinstance(rows, np.ndarray):
            # check_rows accepted a packed matrix only for an all-numeric schema, which encodes
            # to the matrix itself: skip splitting it into columns and stacking them again.
            return np.ascontiguousarray(rows, dtype=np.float64)
        blocks: list[np.ndarray] = []
        for j, column in enumerate(columns):
            if not isinstance(column, list):
                blocks.append(column[:, None])
                continue
            encoding = self.encodings[j]
            if encoding == CategoricalEncoding.FREQUENCY:
                freq = self.frequencies[j]
                blocks.append(np.array([freq.get(v, 0.0) for v in column])[:, None])
                continue
            if encoding == CategoricalEncoding.HASH:
                width = self.hash_buckets
                memo: dict[str, int] = {}
                positions = [memo.setdefault(v, hash_bucket(v, width)) for v in column]
            else:
                index = {c: k for k, c in enumerate(self.categories[j])}
                unseen = len(index)
                positions = [index.get(v, unseen) for v in column]
                if encoding == CategoricalEncoding.LABEL:
                    blocks.append(np.asarray(positions, dtype=np.float64)[:, None])
                    continue
                width = max(1, unseen)
            block = np.zeros((len(column), width + 1))
            block[np.arange(len(column)), positions] = 1.0
            blocks.append(block[:, :width])  # the extra column catches unseen one-hot categories
        return np.hstack(blocks)


def feature_shares(deviation: np.ndarray, output_features: Sequence[int], width: int) -> np.ndarray:
    """Sum per-output-column deviations into shares per schema feature.

    Args:
        deviation: non-negative array (n, output columns).
        output_features: schema index of each output column.
        width: number of schema features.

    Returns:
        Array (n, width) whose rows sum to 1 (uniform for a row without deviation).

    """
    totals = np.zeros((deviation.shape[0], width))
    np.add.at(totals.T, np.asarray(output_features), deviation.T)
    sums = totals.sum(axis=1, keepdims=True)
    uniform = np.full_like(totals, 1.0 / max(width, 1))
    return np.where(sums > 0, totals / np.where(sums > 0, sums, 1.0), uniform)
