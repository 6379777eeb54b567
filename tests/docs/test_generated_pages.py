"""The site's generated pages hold what they are generated from (their renderers, without MkDocs).

``docs/gen/_proto_markdown.py``, ``_openapi_markdown.py`` and ``_bench_markdown.py`` are loaded
by path, as the gen-files scripts load them (``docs/gen/`` is not a package).
"""

from __future__ import annotations

import html
import importlib
import io
import json
import re
import runpy
import sys
from pathlib import Path
from types import ModuleType

import pytest

from bench.results import markdown

REPO_ROOT = Path(__file__).resolve().parents[2]
GEN = REPO_ROOT / "docs" / "gen"
RESULTS = REPO_ROOT / "bench" / "results"


def _load(name: str) -> ModuleType:
    """A renderer of docs/gen/, imported as the gen-files scripts import it (the folder on the path)."""
    if str(GEN) not in sys.path:
        sys.path.insert(0, str(GEN))
    return importlib.import_module(name)


def _words(text: str) -> str:
    """The text's words in order, markup and escapes aside: what a reader sees of a comment."""
    return " ".join(re.findall(r"\w+", html.unescape(text.replace("\\", ""))))


# --- gRPC ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def proto_markdown() -> ModuleType:
    return _load("_proto_markdown")


@pytest.fixture(scope="module")
def descriptors(proto_markdown):
    return proto_markdown.compile_descriptor_set(REPO_ROOT / "protos")


@pytest.fixture(scope="module")
def grpc_page(proto_markdown, descriptors) -> str:
    return proto_markdown.render_markdown(descriptors)


def test_descriptors_cover_every_proto_with_comments(descriptors):
    names = {f.name for f in descriptors.file}
    assert names == {
        p.relative_to(REPO_ROOT / "protos").as_posix() for p in (REPO_ROOT / "protos").rglob("*.proto")
    }
    assert all(f.source_code_info.location for f in descriptors.file)  # --include_source_info took


def test_grpc_page_has_every_element_with_its_comment(proto_markdown, descriptors, grpc_page):
    found = proto_markdown.elements(descriptors)
    kinds = {e.kind for e in found}
    assert kinds == {"service", "rpc", "message", "enum"}
    page_words = _words(grpc_page)
    missing_comments = []
    for element in found:
        assert f"{{ #{proto_markdown.anchor(element.full_name)} }}" in grpc_page, element
        if element.comment and _words(element.comment) not in page_words:
            missing_comments.append(element.full_name)
    assert not missing_comments
    # Every element the protos comment on is commented here: the reference is not a bare listing.
    assert sum(1 for e in found if e.comment) > len(found) * 0.9


def test_grpc_page_links_and_fields(proto_markdown, descriptors, grpc_page):
    anchors = re.findall(r"\{ #([^ }]+) \}", grpc_page)
    assert len(anchors) == len(set(anchors)), "anchors must be unique"
    links = set(re.findall(r"\]\(#([^)]+)\)", grpc_page))
    assert links <= set(anchors), links - set(anchors)
    usage = grpc_page.split("{ #universal_runtime.v1.Usage }", 1)[1].split("\n### ", 1)[0]
    assert "| `prompt_tokens` | 1 | `int32` |" in usage
    ocr = grpc_page.split("{ #universal_runtime.v1.InferenceService.Ocr }", 1)[1].split("\n#", 1)[0]
    assert "Request: **stream** [`OcrRequest`](#universal_runtime.v1.OcrRequest)" in ocr
    assert "Response: **stream** [`OcrResponse`](#universal_runtime.v1.OcrResponse)" in ocr
    assert "map&lt;`string`, `string`&gt;" in grpc_page  # map fields, their entry types not listed
    assert not any(e.full_name.endswith("Entry") for e in proto_markdown.elements(descriptors))
    assert "oneof `kind`" in grpc_page and "| optional |" in grpc_page


def test_comment_markup_is_escaped(proto_markdown):
    assert proto_markdown._cell("a | b <i> [x](y) `c | <d>`") == "a \\| b &lt;i&gt; \\[x](y) `c | <d>`"
    assert proto_markdown._block("# not a heading\nx > y") == "\\# not a heading\nx &gt; y"


# --- OpenAPI ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def openapi_markdown() -> ModuleType:
    return _load("_openapi_markdown")


@pytest.fixture(scope="module")
def openapi_schema(openapi_markdown) -> dict:
    return openapi_markdown.gateway_openapi()


@pytest.fixture(scope="module")
def openapi_page(openapi_markdown, openapi_schema) -> str:
    return openapi_markdown.render_markdown(openapi_schema)


def test_openapi_page_has_every_operation_and_schema(openapi_markdown, openapi_schema, openapi_page):
    ops = openapi_markdown.operations(openapi_schema)
    assert len(ops) >= 30 and ("POST", "/v1/chat/completions") in {(m, p) for m, p, _ in ops}
    for method, path, operation in ops:
        anchor = openapi_markdown.operation_anchor(method, path)
        assert f"### `{method} {path}` {{ #{anchor} }}" in openapi_page
        section = openapi_page.split(f"{{ #{anchor} }}", 1)[1].split("\n### ", 1)[0]
        for status in operation.get("responses", {}):
            assert f"\n| {status} |" in section, (method, path, status)
    for name in openapi_schema["components"]["schemas"]:
        assert f"{{ #{openapi_markdown.schema_anchor(name)} }}" in openapi_page
    anchors = re.findall(r"\{ #([^ }]+) \}", openapi_page)
    assert len(anchors) == len(set(anchors))
    assert set(re.findall(r"\]\(#([^)]+)\)", openapi_page)) <= set(anchors)


def test_openapi_types_read_as_types(openapi_markdown):
    known = {"Box"}
    nullable = {"anyOf": [{"type": "string"}, {"type": "null"}]}
    assert openapi_markdown._type(nullable, known) == "`string` or `null`"
    assert openapi_markdown._type(
        {"type": "array", "items": {"$ref": "#/components/schemas/Box"}}, known
    ) == ("array of [`Box`](#schema.Box)")
    assert openapi_markdown._type({"type": "object", "additionalProperties": {"type": "number"}}, known) == (
        "map of `number`"
    )
    assert openapi_markdown._type({"const": "list"}, known) == '`"list"`'
    assert openapi_markdown._type({}, known) == "any"


# --- benchmarks ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bench_markdown() -> ModuleType:
    return _load("_bench_markdown")


@pytest.fixture(scope="module")
def payloads(bench_markdown) -> dict:
    return bench_markdown.load_payloads(RESULTS)


@pytest.fixture(scope="module")
def readme() -> str:
    return (REPO_ROOT / "bench" / "README.md").read_text()


def _available() -> list[str]:
    return [p.name for p in RESULTS.iterdir() if p.is_file() and p.suffix in (".json", ".png")]


def test_every_area_is_on_the_benchmarks_page(bench_markdown, payloads, readme):
    assert payloads, "bench/results holds no JSON"
    page = bench_markdown.render_page(readme, payloads, markdown, _available())
    on_page = bench_markdown.sections(page)
    assert set(payloads) <= set(on_page)
    for area in payloads:
        assert f"](results/{area}.json)" in page, area  # each JSON is linked where the site has it


def test_standard_sections_equal_bench_results_markdown(bench_markdown, payloads, readme):
    rendered = bench_markdown.render_sections(readme, payloads, markdown)
    sections = bench_markdown.sections(rendered.text)
    standard = [area for area, payload in payloads.items() if bench_markdown.is_standard(payload)]
    assert standard and sorted(standard) == sorted(
        rendered.rerendered + [a for a in rendered.appended if a in standard]
    )
    page = bench_markdown.render_page(readme, payloads, markdown, _available())
    for area in standard:
        expected = markdown(json.loads((RESULTS / f"{area}.json").read_text()))
        assert sections[area] == expected, area
        # The page shows the same section, its result files linked and its lists started.
        site = bench_markdown.site_lists(bench_markdown.site_links(expected, _available()))
        assert site in page, area


def test_non_standard_sections_keep_the_readme_text(bench_markdown, readme):
    odd = {"eviction": {"area": "eviction", "runs": []}, "newarea": {"area": "newarea", "runs": []}}
    rendered = bench_markdown.render_sections(readme, odd, markdown)
    assert bench_markdown.sections(rendered.text)["eviction"] == bench_markdown.sections(readme)["eviction"]
    assert {"eviction", "overhead"} <= set(rendered.kept)  # odd payload; no payload at all
    assert rendered.appended == ["newarea"]
    assert "JSON: `results/newarea.json`." in bench_markdown.sections(rendered.text)["newarea"]


def test_site_links(bench_markdown):
    text = (
        "JSON: `results/a.json`, plot: `a.png`, `bench/results/<area>.json`, [src](../engines/x.py), "
        "[up](../README.md#run), [web](https://example.com), [here](#run), ![p](results/a.png)\n"
        "```sh\n`results/a.json` [src](../engines/x.py)\n```\n"
    )
    out = bench_markdown.site_links(text, ["a.json", "a.png"])
    assert "JSON: [`results/a.json`](results/a.json), plot: [`a.png`](results/a.png)" in out
    assert "`bench/results/<area>.json`" in out  # not a file the site has: left as code
    assert "src (`engines/x.py`)" in out and "up (`README.md#run`)" in out
    assert "[web](https://example.com)" in out and "[here](#run)" in out and "![p](results/a.png)" in out
    assert out.endswith("```sh\n`results/a.json` [src](../engines/x.py)\n```\n")  # fences untouched


def test_site_lists(bench_markdown):
    text = "para:\n  - one\n  - two\n\n- kept\n  - nested\n```\nx:\n  - y\n```\n"
    assert (
        bench_markdown.site_lists(text)
        == "para:\n\n- one\n- two\n\n- kept\n  - nested\n```\nx:\n  - y\n```\n"
    )


# --- the gen-files scripts ----------------------------------------------------------------------


class _FakeGenFiles(ModuleType):
    """Stands in for ``mkdocs_gen_files``: records what a script writes, by virtual path."""

    def __init__(self) -> None:
        super().__init__("mkdocs_gen_files")
        self.written: dict[str, str | bytes] = {}
        self.edit_paths: dict[str, str] = {}

    def open(self, name: str, mode: str = "r"):
        assert "w" in mode, mode
        written = self.written

        class Sink(io.BytesIO if "b" in mode else io.StringIO):
            def close(self) -> None:  # what `with mkdocs_gen_files.open(...)` ends with
                written[name] = self.getvalue()
                super().close()

        return Sink()

    def set_edit_path(self, name: str, edit_name: str) -> None:
        self.edit_paths[name] = edit_name


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        ("grpc_reference.py", {"reference/grpc.md"}),
        ("openapi_reference.py", {"reference/openapi.md", "reference/openapi.json"}),
        ("benchmarks.py", {"benchmarks/index.md", "benchmarks/results/generation.json"}),
    ],
)
def test_gen_files_scripts_write_their_pages(monkeypatch, script, expected):
    fake = _FakeGenFiles()
    monkeypatch.setitem(sys.modules, "mkdocs_gen_files", fake)
    runpy.run_path(str(GEN / script))
    assert expected <= set(fake.written)
    assert set(fake.edit_paths) <= set(fake.written)
    if script == "openapi_reference.py":
        assert json.loads(fake.written["reference/openapi.json"])["paths"]
    if script == "benchmarks.py":
        copied = {name for name in fake.written if name.startswith("benchmarks/results/")}
        assert copied == {f"benchmarks/results/{name}" for name in _available()}
        png = next(name for name in copied if name.endswith(".png"))
        assert fake.written[png] == (RESULTS / Path(png).name).read_bytes()
