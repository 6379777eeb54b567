"""Lines of the Batch API's files: input lines checked up front, the URLs they may name, output lines.

An input line is ``{"custom_id": "...", "method": "POST", "url": "/v1/embeddings", "body": {...}}``
(OpenAI's Batch API). :func:`parse_input` checks a whole file before anything is stored, so a batch
job never discovers a bad line hours in: each refusal is INVALID_ARGUMENT naming the 1-based line
number and the problem (reason INVALID_BATCH_LINE, metadata ``line`` and ``problem``), or naming
the limit the file is over (BATCH_FILE_TOO_LARGE, BATCH_FILE_TOO_MANY_LINES).

Output lines follow OpenAI's batch output and error files (``id``, ``custom_id``, ``response``
with ``status_code``, ``request_id`` and ``body``, ``error`` with ``code`` and ``message``);
:func:`output_line` makes one from a line's result.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from engines.errors import InvalidArgumentError, clip_text
from engines.reasons import Reason

#: The endpoints a batch job's line may call: OpenAI's three, and this runtime's own POST routes that
#: answer JSON (gateway/routes: rerank, classify, OCR and the document routes).
SUPPORTED_URLS = (
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/embeddings",
    "/v1/rerank",
    "/v1/classify",
    "/v1/ocr",
    "/v1/documents/analyze",
    "/v1/documents/ask",
    "/v1/documents/extract",
    "/v1/documents/classify",
)

#: Longest ``custom_id``, characters (OpenAI documents no limit; 512 keeps output lines and error
#: messages small, and ids in practice are short keys).
CUSTOM_ID_MAX_CHARS = 512

#: Most errors a failed validation lists on the batch job (the rest are counted in the last one's message).
MAX_LISTED_ERRORS = 1000


@dataclass(frozen=True, slots=True)
class InputLimits:
    """Bounds of an input file.

    Attributes:
        max_bytes: most bytes of a file.
        max_lines: most request lines (empty lines are not counted).
        line_max_bytes: most bytes of one line.

    """

    max_bytes: int
    max_lines: int
    line_max_bytes: int


@dataclass(frozen=True, slots=True)
class InputLine:
    """One request line of an input file.

    Attributes:
        index: its place among the file's request lines, from 0 (the key of its result).
        line: its line number in the file, from 1 (empty lines count; what errors name).
        custom_id: the caller's id, unique in the file.
        url: the endpoint it calls (one of :data:`SUPPORTED_URLS`).
        body: the request body, a JSON object.

    """

    index: int
    line: int
    custom_id: str
    url: str
    body: dict[str, Any]


def bad_line(line: int, problem: str) -> InvalidArgumentError:
    """INVALID_ARGUMENT INVALID_BATCH_LINE: line ``line`` (1-based) of the file has ``problem``."""
    return InvalidArgumentError(
        f"line {line} of the batch file: {problem}",
        reason=Reason.INVALID_BATCH_LINE,
        line=line,
        problem=problem,
    )


def check_size(size: int, limits: InputLimits) -> None:
    """Refuse a file of ``size`` bytes over ``limits.max_bytes`` (uploads check as chunks arrive).

    Raises:
        InvalidArgumentError: reason BATCH_FILE_TOO_LARGE, metadata ``limit`` (bytes).

    """
    if size > limits.max_bytes:
        raise InvalidArgumentError(
            f"the batch file is over {limits.max_bytes} bytes, the most a file may hold "
            "(UR_BATCH_FILE_MAX_BYTES); split it into several batches",
            reason=Reason.BATCH_FILE_TOO_LARGE,
            limit=limits.max_bytes,
        )


def _field(value: dict[str, Any], line: int, name: str, kind: type, what: str) -> Any:
    if name not in value:
        raise bad_line(line, f"'{name}' is missing; every line needs custom_id, method, url and body")
    field = value[name]
    if not isinstance(field, kind):
        raise bad_line(line, f"'{name}' must be {what}, not {type(field).__name__}")
    return field


def _parse_line(text: str, line: int, index: int) -> InputLine:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:  # RecursionError: nesting past Python's limit
        raise bad_line(line, f"not valid JSON ({clip_text(str(exc), 120)})") from None
    if not isinstance(value, dict):
        raise bad_line(line, f"a line must be a JSON object, not {type(value).__name__}")
    custom_id = _field(value, line, "custom_id", str, "a string")
    if not custom_id or len(custom_id) > CUSTOM_ID_MAX_CHARS:
        raise bad_line(
            line, f"'custom_id' must be 1 to {CUSTOM_ID_MAX_CHARS} characters, not {len(custom_id)}"
        )
    method = _field(value, line, "method", str, "a string")
    if method != "POST":
        raise bad_line(line, f"'method' must be 'POST', not {clip_text(method, 32)!r}")
    url = _field(value, line, "url", str, "a string")
    if url not in SUPPORTED_URLS:
        raise bad_line(
            line, f"'url' {clip_text(url, 64)!r} is not supported; one of {', '.join(SUPPORTED_URLS)}"
        )
    body = _field(value, line, "body", dict, "a JSON object")
    if (
        body.get("stream") is True
    ):  # a batch job's line is answered with one JSON body (OpenAI refuses it too)
        raise bad_line(line, "'body.stream' must not be true: a batch line is answered whole")
    return InputLine(index, line, custom_id, url, body)


def parse_input(data: bytes, limits: InputLimits) -> list[InputLine]:
    r"""Every request line of a batch input file, checked.

    Args:
        data: the file: UTF-8 JSON lines separated by ``\\n`` (``\\r\\n`` too); empty lines are
            skipped but counted in line numbers.
        limits: its bounds.

    Returns:
        The request lines in file order, at most ``limits.max_lines``.

    Raises:
        InvalidArgumentError: over a bound (BATCH_FILE_TOO_LARGE, BATCH_FILE_TOO_MANY_LINES,
            metadata ``limit``); not UTF-8 or without a request line (INVALID_BATCH_FILE); a bad
            line, the first one found (INVALID_BATCH_LINE, metadata ``line`` and ``problem``): not
            JSON, not an object, a field missing or of the wrong type, a ``custom_id`` empty, too
            long or already used, a method other than POST, an unsupported url.

    """
    check_size(len(data), limits)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InvalidArgumentError(
            f"the batch file is not UTF-8 (line {line}, byte {exc.start})",
            reason=Reason.INVALID_BATCH_FILE,
            line=line,
        ) from None
    lines: list[InputLine] = []
    first_line: dict[str, int] = {}  # custom_id -> the line that used it first
    # Bounded: the file is at most max_bytes, and more than max_lines request lines stop the loop.
    for number, raw in enumerate(text.split("\n"), start=1):
        raw = raw.removesuffix("\r")
        if not raw.strip():
            continue
        if len(lines) == limits.max_lines:
            raise InvalidArgumentError(
                f"the batch file has more than {limits.max_lines} request lines, the most a file may hold "
                "(UR_BATCH_FILE_MAX_LINES); split it into several batches",
                reason=Reason.BATCH_FILE_TOO_MANY_LINES,
                limit=limits.max_lines,
                line=number,
            )
        if len(raw.encode("utf-8")) > limits.line_max_bytes:
            raise bad_line(
                number, f"the line is over {limits.line_max_bytes} bytes, the most one line may hold"
            )
        parsed = _parse_line(raw, number, len(lines))
        if parsed.custom_id in first_line:
            raise bad_line(
                number,
                f"custom_id {clip_text(parsed.custom_id, 64)!r} is already used on line "
                f"{first_line[parsed.custom_id]}; custom_id must be unique in the file",
            )
        first_line[parsed.custom_id] = number
        lines.append(parsed)
    if not lines:
        raise InvalidArgumentError("the batch file holds no request lines", reason=Reason.INVALID_BATCH_FILE)
    return lines


@dataclass(frozen=True, slots=True)
class LineResult:
    """What became of one line (stored as it completes; see :mod:`service.batches.results`).

    Attributes:
        status_code: the HTTP status the endpoint answered, or 0 when it gave no answer.
        body: the endpoint's JSON answer (None without one).
        request_id: the id the line ran under (logs name it).
        error_code: why the line got no answer (``status_code`` 0), else "".
        error_message: the same, in words.

    """

    status_code: int
    body: Any
    request_id: str
    error_code: str = ""
    error_message: str = ""

    @property
    def ok(self) -> bool:
        """Whether the endpoint answered 2xx (the line goes to the output file)."""
        return 200 <= self.status_code < 300

    def to_json(self) -> bytes:
        """The stored form."""
        return json.dumps(
            {
                "status_code": self.status_code,
                "body": self.body,
                "request_id": self.request_id,
                "error_code": self.error_code,
                "error_message": self.error_message,
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def from_json(cls, data: bytes) -> LineResult:
        """The stored form read back."""
        value = json.loads(data)
        return cls(
            int(value["status_code"]),
            value.get("body"),
            str(value.get("request_id", "")),
            str(value.get("error_code", "")),
            str(value.get("error_message", "")),
        )


def _answer_error(result: LineResult) -> dict[str, str]:
    """``error`` of a non-2xx answer: OpenAI's error object of the body when there is one."""
    error = result.body.get("error") if isinstance(result.body, dict) else None
    if isinstance(error, dict):
        code = error.get("code") or error.get("type") or f"http_{result.status_code}"
        message = error.get("message") or ""
    else:
        code, message = f"http_{result.status_code}", ""
    return {"code": str(code), "message": str(message) or f"the endpoint answered HTTP {result.status_code}"}


def request_line_id(batch_id: str, index: int) -> str:
    """The ``batch_req_...`` id of a batch job's line ``index``: the same on every (resumed) finalize."""
    digest = hashlib.sha256(f"{batch_id}/{index}".encode()).hexdigest()
    return f"batch_req_{digest[:32]}"


def output_line(batch_id: str, line: InputLine, result: LineResult | None, missing: tuple[str, str]) -> bytes:
    r"""One line of the output file (a 2xx answer) or the error file (anything else), OpenAI's shape.

    Args:
        batch_id: the batch job.
        line: the input line.
        result: what it became, or None when it never ran (the batch job was cancelled or expired).
        missing: ``(code, message)`` of the error of a line that never ran.

    Returns:
        The JSON line, with its ``\\n``.

    """
    record: dict[str, Any] = {"id": request_line_id(batch_id, line.index), "custom_id": line.custom_id}
    if result is None:
        record["response"] = None
        record["error"] = {"code": missing[0], "message": missing[1]}
    elif result.status_code == 0:
        record["response"] = None
        record["error"] = {"code": result.error_code, "message": result.error_message}
    else:
        record["response"] = {
            "status_code": result.status_code,
            "request_id": result.request_id,
            "body": result.body,
        }
        record["error"] = None if result.ok else _answer_error(result)
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
