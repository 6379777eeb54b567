"""The ErrorInfo reasons (engines.reasons): one enum, each with its gRPC code and HTTP status.

Checks the table itself, that the gateway answers each reason with the table's HTTP status, that
the service's statuses carry a member as its wire string, and (an AST scan of service/, engines/
and gateway/) that no code spells a reason as a bare string literal.
"""

from __future__ import annotations

import ast
import fnmatch
import pickle
from pathlib import Path

import grpc
import httpx
import pytest
from google.rpc import error_details_pb2, status_pb2

from engines import errors
from engines.reasons import HTTP_STATUS_BY_GRPC_CODE, REASONS, Reason, ReasonSpec, spec_of
from gateway.app import create_app
from gateway.errors import RETRY_LATER_REASONS, http_status_for_grpc, retry_after_headers, rpc_error_to_http
from service.status import internal_status, rich_status, status_for_error
from tests.gateway.gateway_fakes import RpcFailure, asgi_client, run_fake_server

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("service", "engines", "gateway")
MEMBERS = list(Reason)

# Files that still spell reasons as string literals: others are rewriting them (and the packages
# they are split into). This list must become empty: convert a file, then remove its entry.
NOT_YET_CONVERTED: tuple[str, ...] = ()

# Reasons that say more than their code: a size limit retrying cannot fix is 413, not 429; a full
# store or a key's file count is 507 Insufficient Storage (delete something), not 429.
HTTP_OVERRIDES = {
    Reason.AUDIO_TOO_LONG: 413,
    Reason.FILE_TOO_LARGE: 413,
    Reason.FIT_TOO_SLOW: 413,
    Reason.IMAGE_TOO_LARGE: 413,
    Reason.MESSAGE_TOO_LARGE: 413,
    Reason.PAGE_TOO_COMPLEX: 413,
    Reason.TOO_MANY_PAGES: 413,
    Reason.STORAGE_FULL: 507,
    Reason.STORAGE_QUOTA_EXCEEDED: 507,
    Reason.TOO_MANY_FILES: 507,
}


def _rpc_error(code: grpc.StatusCode, message: str, reason: str) -> grpc.aio.AioRpcError:
    trailing = RpcFailure(code, message, reason).trailing_metadata()
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(*trailing), message)


# -- the table --------------------------------------------------------------------------------


@pytest.mark.parametrize("reason", MEMBERS, ids=str)
def test_member_is_its_wire_string_with_a_spec(reason: Reason) -> None:
    assert reason.value == reason.name
    assert reason == reason.name and str(reason) == reason.name and f"{reason}" == reason.name
    spec = REASONS[reason]
    assert isinstance(spec, ReasonSpec)
    assert spec.description and "\n" not in spec.description
    assert spec_of(reason.name) is spec  # a wire string finds the same entry


@pytest.mark.parametrize("reason", MEMBERS, ids=str)
def test_grpc_code_is_a_real_status_code_and_http_status_an_error(reason: Reason) -> None:
    spec = REASONS[reason]
    assert spec.grpc_code in grpc.StatusCode.__members__
    assert spec.grpc_code != "OK"
    assert 400 <= spec.http_status <= 599


@pytest.mark.parametrize("reason", MEMBERS, ids=str)
def test_http_status_is_the_codes_unless_the_reason_says_more(reason: Reason) -> None:
    spec = REASONS[reason]
    expected = HTTP_OVERRIDES.get(reason, HTTP_STATUS_BY_GRPC_CODE.get(spec.grpc_code, 500))
    assert spec.http_status == expected


def test_only_busy_reasons_ask_to_retry_later() -> None:
    assert {reason for reason, spec in REASONS.items() if spec.retry_later} == {
        Reason.OVERLOADED,
        Reason.QUEUE_WAIT_EXCEEDED,
    }
    assert all(REASONS[reason].grpc_code == "RESOURCE_EXHAUSTED" for reason in RETRY_LATER_REASONS)


def test_unknown_reason_has_no_spec() -> None:
    assert spec_of("NO_SUCH_REASON") is None
    assert spec_of(None) is None and spec_of("") is None
    assert http_status_for_grpc(grpc.StatusCode.NOT_FOUND, reason="NO_SUCH_REASON") == 404


def test_reasons_module_is_a_stdlib_leaf() -> None:
    tree = ast.parse((ROOT / "engines" / "reasons.py").read_text())
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        node.module.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert imported <= {"__future__", "enum", "dataclasses"}


# -- the error classes and the service's statuses ---------------------------------------------


def _error_classes(base: type) -> list[type]:
    found = []
    for cls in base.__subclasses__():
        found += [cls, *_error_classes(cls)]
    return found


@pytest.mark.parametrize(
    "cls", [errors.RuntimeServiceError, *_error_classes(errors.RuntimeServiceError)], ids=lambda c: c.__name__
)
def test_error_class_default_reason_is_a_member_with_the_class_code(cls: type) -> None:
    module = cls.__module__.replace(".", "/") + ".py"
    if _not_yet_converted(module):
        assert cls.reason in _REASON_NAMES, f"{cls.__qualname__}.reason is {cls.reason!r}"
    else:
        assert isinstance(cls.reason, Reason), f"{cls.__qualname__}.reason is {cls.reason!r}"
    # ModelLoadError's MODEL_* reasons are INTERNAL; a class's own default travels with its code.
    assert REASONS[cls.reason].grpc_code == cls.status


def test_status_carries_the_member_as_its_wire_string() -> None:
    error = errors.ModelNotFoundError("no model 'x'", model="x")
    assert error.reason is Reason.MODEL_NOT_FOUND
    status = status_for_error(error)
    assert status.code == grpc.StatusCode.NOT_FOUND
    trailer = dict(status.trailing_metadata)["grpc-status-details-bin"]
    info = error_details_pb2.ErrorInfo()
    status_pb2.Status.FromString(trailer).details[0].Unpack(info)
    assert info.reason == "MODEL_NOT_FOUND" and type(info.reason) is str
    direct = rich_status(grpc.StatusCode.RESOURCE_EXHAUSTED, "busy", Reason.OVERLOADED)
    assert b"OVERLOADED" in dict(direct.trailing_metadata)["grpc-status-details-bin"]
    assert b"INTERNAL" in dict(internal_status("r-1").trailing_metadata)["grpc-status-details-bin"]


def test_error_with_a_member_survives_pickling() -> None:
    # A process lane sends an engine's error back to the service pickled.
    error = errors.queue_wait_exceeded("m", 2.0, 1.0)
    assert pickle.loads(pickle.dumps(error.reason)) is Reason.QUEUE_WAIT_EXCEEDED


# -- the gateway ------------------------------------------------------------------------------


@pytest.mark.parametrize("reason", MEMBERS, ids=str)
def test_gateway_renders_each_reasons_http_status(reason: Reason) -> None:
    spec = REASONS[reason]
    status, body = rpc_error_to_http(_rpc_error(grpc.StatusCode[spec.grpc_code], "it failed", reason))
    assert status == spec.http_status
    assert body["error"]["code"] == reason.lower()
    headers = retry_after_headers(_rpc_error(grpc.StatusCode[spec.grpc_code], "it failed", reason))
    assert ("Retry-After" in headers) == spec.retry_later


async def test_gateway_answers_each_reasons_http_status_over_http() -> None:
    wrong = {}
    async with run_fake_server() as fake, asgi_client(create_app(fake.target)) as http:
        for reason in MEMBERS:
            spec = REASONS[reason]
            fake.inference.fail = RpcFailure(grpc.StatusCode[spec.grpc_code], "it failed", reason)
            response = await http.post(
                "/v1/embeddings", json={"model": "m", "input": "x"}, timeout=httpx.Timeout(30)
            )
            if response.status_code != spec.http_status or response.json()["error"]["code"] != reason.lower():
                wrong[reason] = (response.status_code, response.json()["error"]["code"])
    assert not wrong, f"answered other than the table: {wrong}"


# -- no reason spelled as a string literal ----------------------------------------------------

_REASON_NAMES = {reason.value for reason in Reason}
# Reason names that are also gRPC status code names: a literal of one is fine as a status code.
_ALSO_CODES = _REASON_NAMES & set(grpc.StatusCode.__members__)


def _mentions_reason(node: ast.AST) -> bool:
    """Whether an expression names a reason: ``reason``, ``info.reason``, ``RETRY_REASONS``..."""
    for sub in ast.walk(node):
        name = sub.id if isinstance(sub, ast.Name) else sub.attr if isinstance(sub, ast.Attribute) else ""
        if "reason" in name.lower():
            return True
    return False


def _reason_literals(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, value)`` of each string literal used as a reason in ``tree``.

    A literal equal to a reason's name counts wherever it is, unless that name is also a gRPC
    status code's (``INTERNAL``, ``UNAVAILABLE``...) and the literal is not in a reason's place:
    a ``reason=`` keyword, a comparison with or an assignment to something named ``*reason*``,
    a ``reason`` parameter's default, or the reason argument of ``rich_status``.
    """
    found: list[tuple[int, str]] = []
    in_reason_place: set[int] = set()

    def mark(value: ast.AST | None) -> None:
        for sub in ast.walk(value) if value is not None else ():
            if isinstance(sub, ast.Constant):
                in_reason_place.add(id(sub))

    for node in ast.walk(tree):
        if isinstance(node, (ast.Call, ast.ClassDef)):
            for keyword in node.keywords:
                if keyword.arg == "reason":
                    if isinstance(keyword.value, ast.Constant) and isinstance(keyword.value.value, str):
                        found.append((keyword.value.lineno, keyword.value.value))
                    mark(keyword.value)
        if isinstance(node, ast.Call) and _mentions_rich_status(node.func) and len(node.args) >= 3:
            mark(node.args[2])
        if isinstance(node, ast.Compare) and _mentions_reason(node):
            mark(node)
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(_mentions_reason(target) for target in targets):
                mark(node.value)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            positional = args.posonlyargs + args.args
            for arg, default in zip(
                positional[len(positional) - len(args.defaults) :], args.defaults, strict=True
            ):
                if "reason" in arg.arg:
                    mark(default)
            for arg, default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
                if "reason" in arg.arg:
                    mark(default)
    seen = {(line, value) for line, value in found}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            continue
        if node.value not in _REASON_NAMES or (node.lineno, node.value) in seen:
            continue
        if node.value in _ALSO_CODES and id(node) not in in_reason_place:
            continue
        found.append((node.lineno, node.value))
    return sorted(found)


def _mentions_rich_status(func: ast.AST) -> bool:
    return (isinstance(func, ast.Name) and func.id == "rich_status") or (
        isinstance(func, ast.Attribute) and func.attr == "rich_status"
    )


def _scanned_files() -> list[Path]:
    return sorted(path for folder in SCANNED for path in (ROOT / folder).rglob("*.py"))


def _not_yet_converted(relative: str) -> bool:
    return any(fnmatch.fnmatch(relative, pattern) for pattern in NOT_YET_CONVERTED)


def test_no_reason_is_a_string_literal() -> None:
    offenders = []
    for path in _scanned_files():
        relative = path.relative_to(ROOT).as_posix()
        if relative == "engines/reasons.py" or _not_yet_converted(relative):
            continue
        offenders += [
            f"{relative}:{line}: {value!r}" for line, value in _reason_literals(ast.parse(path.read_text()))
        ]
    assert not offenders, "use engines.reasons.Reason instead:\n" + "\n".join(offenders)


def test_scan_finds_reason_literals() -> None:
    source = """
class E(Base, status="NOT_FOUND", reason="MODEL_NOT_FOUND"):
    reason = "INTERNAL"
X = "OVERLOADED"
f(reason="NO_SUCH_REASON")
if info.reason == "UNAVAILABLE": pass
rich_status(code, message, "INTERNAL")
def g(*, reason="INVALID_ARGUMENT"): pass
ok = {"status": "INTERNAL", "retryableStatusCodes": ["UNAVAILABLE"]}
"""
    assert _reason_literals(ast.parse(source)) == [
        (2, "MODEL_NOT_FOUND"),
        (3, "INTERNAL"),
        (4, "OVERLOADED"),
        (5, "NO_SUCH_REASON"),
        (6, "UNAVAILABLE"),
        (7, "INTERNAL"),
        (8, "INVALID_ARGUMENT"),
    ]


def test_reasons_of_files_not_yet_converted_are_members() -> None:
    # So that converting a file is a mechanical change: every reason it spells is in the enum.
    unknown = []
    for path in _scanned_files():
        relative = path.relative_to(ROOT).as_posix()
        if not _not_yet_converted(relative):
            continue
        for line, value in _reason_literals(ast.parse(path.read_text())):
            if value not in _REASON_NAMES:
                unknown.append(f"{relative}:{line}: {value!r}")
    assert not unknown, "add these reasons to engines.reasons.Reason:\n" + "\n".join(unknown)
