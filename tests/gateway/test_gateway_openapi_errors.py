"""The OpenAPI document lists every error a route can answer, with the error body's schema."""

from __future__ import annotations

import pytest

from gateway.app import create_app

API_ERRORS = {"400", "401", "404", "413", "422", "429", "500", "503", "504"}
# The Anthropic Messages API has its own error shape, and 529 for a full queue.
ANTHROPIC_ROUTES = ("/v1/messages", "/v1/messages/count_tokens")
ANTHROPIC_ERRORS = API_ERRORS | {"529"}
HEALTH_ERRORS = {"500", "503", "504"}
METRICS_ERRORS = {"401", "500"}


@pytest.fixture(scope="module")
def openapi() -> dict:
    return create_app("127.0.0.1:1").openapi()


def operations(openapi: dict):
    for path, methods in openapi["paths"].items():
        for method, operation in methods.items():
            yield path, method, operation


def test_every_operation_lists_its_error_statuses(openapi):
    checked = 0
    for path, method, operation in operations(openapi):
        expected = {"/health": HEALTH_ERRORS, "/metrics": METRICS_ERRORS}.get(path, API_ERRORS)
        if path in ANTHROPIC_ROUTES:
            expected = ANTHROPIC_ERRORS
        missing = expected - set(operation["responses"])
        assert not missing, f"{method.upper()} {path} does not list {sorted(missing)}"
        checked += 1
    assert checked >= 15  # every route of the gateway, not an empty document


def test_error_responses_use_the_openai_error_schema(openapi):
    schema = openapi["components"]["schemas"]["ErrorResponse"]
    assert schema["required"] == ["error"]
    detail = openapi["components"]["schemas"]["ErrorDetail"]
    assert set(detail["properties"]) == {"message", "type", "param", "code"}
    anthropic = openapi["components"]["schemas"]["AnthropicErrorDetail"]
    assert set(anthropic["properties"]) == {"type", "message"}
    for path, method, operation in operations(openapi):
        name = "AnthropicErrorResponse" if path in ANTHROPIC_ROUTES else "ErrorResponse"
        for status, response in operation["responses"].items():
            if status.startswith(("4", "5")):
                ref = response["content"]["application/json"]["schema"]["$ref"]
                assert ref == f"#/components/schemas/{name}", f"{method} {path} {status}"


UPLOAD_ROUTES = {
    "/v1/ocr": "OcrJsonRequest",
    "/v1/documents/analyze": "DocumentAnalyzeRequest",
    "/v1/documents/ask": "DocumentAskRequest",
    "/v1/documents/extract": "DocumentExtractRequest",
    "/v1/documents/classify": "DocumentClassifyRequest",
}


def test_upload_routes_document_their_bodies(openapi):
    for path, title in UPLOAD_ROUTES.items():
        operation = openapi["paths"][path]["post"]
        assert set(operation["responses"]) >= API_ERRORS, path
        content = operation["requestBody"]["content"]
        as_json = content["application/json"]["schema"]
        form = content["multipart/form-data"]["schema"]
        assert as_json["title"] == title and as_json["required"][0] == "file"
        assert form["properties"]["file"]["format"] == "binary", path
    ask = openapi["paths"]["/v1/documents/ask"]["post"]["requestBody"]["content"]["application/json"][
        "schema"
    ]
    assert set(ask["required"]) == {"file", "question"}
    assert ask["properties"]["top_k"]["maximum"] == 16
    answer = openapi["paths"]["/v1/documents/ask"]["post"]["responses"]["200"]["content"]["application/json"]
    assert answer["schema"]["$ref"] == "#/components/schemas/DocumentAnswer"
    extract = openapi["paths"]["/v1/documents/extract"]["post"]["requestBody"]["content"]
    assert extract["multipart/form-data"]["schema"]["properties"]["json_schema"]["type"] == "string"
