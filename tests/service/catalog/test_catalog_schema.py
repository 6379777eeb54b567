"""The catalog's JSON Schema and ``universal-runtime catalog schema``/``check``.

Every catalog in the repository passes both the schema and the server's own checks, and each kind
of mistake is refused by both, naming the model and what is wrong.
"""

from __future__ import annotations

import copy
import importlib
import io
import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from engines.errors import InvalidArgumentError
from engines.registry import registered_backends
from service.admin.main import run
from service.catalog_schema import SCHEMA_FILE, catalog_schema
from service.keep_alive import KEEP_ALIVE_PATTERN, parse_keep_alive
from service.model_names import MODEL_NAME_PATTERN, validate_model_name
from tests.conftest import GGUF_SOURCE, MINILM_SOURCE

ROOT = Path(__file__).resolve().parents[3]


def catalog_files() -> list[Path]:
    """Every YAML file of the repository that is a catalog (a ``models`` mapping of entries)."""
    found = []
    for path in sorted(ROOT.rglob("*.y*ml")):
        if any(part.startswith(".") or part == "node_modules" for part in path.relative_to(ROOT).parts):
            continue
        try:
            documents = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
        except yaml.YAMLError:
            continue  # not plain YAML (a template): not a catalog
        if any(isinstance(d, dict) and isinstance(d.get("models"), dict) for d in documents):
            found.append(path)
    return found


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = catalog_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_the_repository_catalogs_are_found():
    names = {str(path.relative_to(ROOT)) for path in catalog_files()}
    assert {"service/default_catalog.yaml", "deploy/k8s/base/catalog.yaml", *POD_CATALOGS} <= names


#: Catalogs whose sources exist only inside a pod: KServe's storage initializer copies the model
#: repository to /mnt/models (tests/deploy/test_deploy_inference_stack.py checks they all point there).
#: Their fields and options are checked here (``--options-only``); their sources at the pod's start.
POD_CATALOGS = {"deploy/kserve/model-repository/catalog.yaml"}


@pytest.mark.parametrize("path", catalog_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_catalog_of_the_repository_passes_the_schema_and_the_check(path, validator):
    errors = [
        f"{list(e.absolute_path)}: {e.message}"
        for e in validator.iter_errors(yaml.safe_load(path.read_text()))
    ]
    assert errors == []
    in_pod = str(path.relative_to(ROOT)) in POD_CATALOGS
    code, out, err = cli("catalog", "check", *(["--options-only"] if in_pod else []), str(path))
    assert (code, err) == (0, ""), out
    assert out.endswith("model(s): no problems\n")


# The catalogs the tests serve, written from Python (module, attribute).
TEST_CATALOGS = [
    ("tests.conftest", "TEST_CATALOG"),
    ("tests.service.admin.conftest", "CLI_CATALOG"),
    ("tests.service.admin.test_prepare", "CATALOG"),
    ("tests.service.model_manager.test_model_load_stall", "CATALOG"),
    ("tests.service.model_manager.test_load_overrides", "CATALOG"),
]


@pytest.mark.parametrize(("module", "name"), TEST_CATALOGS, ids=lambda value: value)
def test_every_test_catalog_passes_the_schema_and_the_option_check(module, name, validator, tmp_path):
    catalog = getattr(importlib.import_module(module), name)
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(catalog)]
    assert errors == []
    path = tmp_path / "catalog.yaml"
    path.write_text(yaml.safe_dump(catalog))
    # --options-only: some entries point at missing sources on purpose (the tests of that error).
    code, out, err = cli("catalog", "check", "--options-only", str(path))
    assert (code, err) == (0, ""), out


def test_the_schema_command_prints_the_generated_schema():
    code, out, err = cli("catalog", "schema")
    assert (code, err) == (0, "")
    assert json.loads(out) == catalog_schema()


def test_the_committed_schema_file_is_the_generated_one():
    committed = json.loads((ROOT / SCHEMA_FILE).read_text())
    assert committed == catalog_schema(), (
        f"{SCHEMA_FILE} is stale: run 'universal-runtime catalog schema > {SCHEMA_FILE}'"
    )


@pytest.mark.parametrize("catalog", ["service/default_catalog.yaml", "deploy/k8s/base/catalog.yaml"])
def test_the_shipped_catalogs_name_the_schema_for_editors(catalog):
    first = (ROOT / catalog).read_text().splitlines()[0]
    prefix = "# yaml-language-server: $schema="
    assert first.startswith(prefix)
    assert ((ROOT / catalog).parent / first.removeprefix(prefix)).resolve() == (ROOT / SCHEMA_FILE).resolve()


def test_each_backend_is_one_variant_with_its_typed_options():
    schema = catalog_schema()
    variants = schema["properties"]["models"]["additionalProperties"]["oneOf"]
    consts = {}
    for variant in variants:
        definition = schema["$defs"][variant["$ref"].rsplit("/", 1)[1]]
        consts[definition["properties"]["backend"]["const"]] = definition
    assert set(consts) == set(registered_backends())
    for backend, cls in registered_backends().items():
        options = consts[backend]["properties"]["options"]
        typed = schema["$defs"][options["$ref"].rsplit("/", 1)[1]]
        assert typed["additionalProperties"] is False
        assert set(typed["properties"]) == set(cls.options_model.model_fields)
        undocumented = [name for name, field in typed["properties"].items() if not field.get("description")]
        assert undocumented == [], f"{backend}: options without a description"


KEEP_ALIVES = [
    "0",
    "-1",
    "5m",
    "1h30m",
    " 30s ",
    "250ms",
    "1.5h",
    "-5m",
    "+2s",
    ".5s",
    "0s",
    "",
    "00",
    "5",
    "5 m",
    "x",
    "+0",
    "-",
]
NAMES = ["a", "org/model", "a.b-c_d", "../x", "a..b", "/abs", "a/b/c", "-x", "a\\b", "é"]


@pytest.mark.parametrize(
    ("pattern", "check", "value"),
    [(KEEP_ALIVE_PATTERN, parse_keep_alive, value) for value in KEEP_ALIVES]
    + [(MODEL_NAME_PATTERN, validate_model_name, name) for name in NAMES],
    ids=lambda value: repr(value) if isinstance(value, str) and not value.startswith("^") else "",
)
def test_the_schemas_patterns_accept_what_the_server_accepts(pattern, check, value):
    """The keep_alive and model name patterns of the schema agree with the server's parsers."""
    try:
        check(value)
        accepted = True
    except (InvalidArgumentError, ValueError):
        accepted = False
    assert (re.search(pattern, value) is not None) == accepted


GOOD = {
    "models": {
        "gguf": {
            "tasks": ["generate"],
            "backend": "llama_cpp",
            "source": GGUF_SOURCE,
            "options": {"n_ctx": 2048},
        },
        "minilm": {
            "tasks": ["embed"],
            "backend": "sentence_transformers",
            "source": MINILM_SOURCE,
            "keep_alive": "10m",
            "options": {"runtime": "torch", "max_batch_size": 16},
        },
    }
}


def _broken(model: str, **changes) -> dict:
    catalog = copy.deepcopy(GOOD)
    entry = catalog["models"][model]
    for key, value in changes.items():
        if key == "options":
            entry.setdefault("options", {}).update(value)
        else:
            entry[key] = value
    return catalog


# (catalog, the model named in the check's line, words the line must hold)
MISTAKES = {
    "unknown option key": (
        _broken("gguf", options={"n_ctxt": 4096}),
        "gguf",
        ["'n_ctxt'", "did you mean n_ctx"],
    ),
    "wrong type": (_broken("gguf", options={"n_ctx": "many"}), "gguf", ["option n_ctx", "integer", "'many'"]),
    "out of range": (
        _broken("minilm", options={"max_batch_size": 0}),
        "minilm",
        ["max_batch_size", "greater than"],
    ),
    "bad enum value": (
        _broken("minilm", options={"runtime": "tensorrt"}),
        "minilm",
        ["runtime", "'openvino'"],
    ),
    "unknown backend": (
        _broken("minilm", backend="tensorrt_llm"),
        "minilm",
        ["unknown backend 'tensorrt_llm'"],
    ),
    "unknown entry key": (
        _broken("minilm", replicas=2),
        "minilm",
        ["replicas", "Extra inputs are not permitted"],
    ),
    "bad task": (_broken("minilm", tasks=["embedd"]), "minilm", ["tasks.0", "'embed'"]),
    "no task": (_broken("minilm", tasks=[]), "minilm", ["tasks", "at least 1"]),
    "bad keep_alive": (
        _broken("minilm", keep_alive="ten minutes"),
        "minilm",
        ["keep_alive", "'ten minutes'"],
    ),
    "wrong type of a common field": (_broken("minilm", pinned="sometimes"), "minilm", ["pinned", "boolean"]),
    "bad model name": ({"models": {"../etc": GOOD["models"]["minilm"]}}, "../etc", ["paths are not allowed"]),
}


@pytest.mark.parametrize("kind", MISTAKES)
def test_a_mistake_is_refused_by_the_schema_and_by_the_check(kind, tmp_path, validator):
    catalog, model, words = MISTAKES[kind]
    errors = list(validator.iter_errors(catalog))
    assert errors, f"the schema accepts a catalog with a {kind}"
    assert all(list(e.absolute_path)[:1] == ["models"] for e in errors)
    path = tmp_path / "catalog.yaml"
    path.write_text(yaml.safe_dump(catalog))
    code, out, err = cli("catalog", "check", "--options-only", str(path))
    assert code == 1
    assert err == f"universal-runtime catalog: 1 of {len(catalog['models'])} model(s) with problems\n"
    lines = out.splitlines()
    assert len(lines) == 1, out
    assert lines[0].startswith(f"{path}: {model}: ")
    for word in words:
        assert word in lines[0]


def test_the_good_catalog_of_those_tests_passes_both(tmp_path, validator):
    assert list(validator.iter_errors(GOOD)) == []
    path = tmp_path / "catalog.yaml"
    path.write_text(yaml.safe_dump(GOOD))
    assert cli("catalog", "check", str(path)) == (0, "1 catalog(s), 2 model(s): no problems\n", "")


def test_an_unknown_top_level_key_is_refused_by_both(tmp_path, validator):
    catalog = {**GOOD, "model": {}}
    errors = list(validator.iter_errors(catalog))
    assert [list(e.absolute_path) for e in errors] == [[]]
    assert "'model' was unexpected" in errors[0].message
    path = tmp_path / "catalog.yaml"
    path.write_text(yaml.safe_dump(catalog))
    code, out, err = cli("catalog", "check", str(path))
    assert code == 1
    assert (
        err
        == "universal-runtime catalog: 0 of 0 model(s) with problems, 1 of 1 catalog(s) unreadable or not a catalog\n"
    )
    assert out.startswith(f"{path}: invalid catalog {path}: ")
    assert "model" in out and "Extra inputs are not permitted" in out


def test_every_problem_of_every_file_is_listed(tmp_path):
    first = tmp_path / "first.yaml"
    first.write_text(yaml.safe_dump(MISTAKES["unknown option key"][0]))
    second = tmp_path / "second.yaml"
    both = _broken("gguf", options={"n_ctx": -1, "max_sequences": 0})
    both["models"]["minilm"]["source"] = str(tmp_path / "missing")
    second.write_text(yaml.safe_dump(both))
    code, out, err = cli("catalog", "check", str(first), str(second))
    assert code == 1
    assert err == "universal-runtime catalog: 3 of 4 model(s) with problems\n"
    lines = out.splitlines()
    assert [line.split(": ")[:2] for line in lines] == [
        [str(first), "gguf"],
        [str(second), "gguf"],
        [str(second), "minilm"],
    ]
    assert "option n_ctx" in lines[1] and "option max_sequences" in lines[1]  # both of one entry's options
    assert "does not exist" in lines[2]  # the source, checked unless --options-only


def test_options_only_skips_what_depends_on_this_machine(tmp_path):
    catalog = copy.deepcopy(GOOD)
    catalog["models"]["minilm"]["source"] = str(tmp_path / "weights-on-another-machine")
    path = tmp_path / "catalog.yaml"
    path.write_text(yaml.safe_dump(catalog))
    assert cli("catalog", "check", str(path))[0] == 1
    assert cli("catalog", "check", "--options-only", str(path)) == (
        0,
        "1 catalog(s), 2 model(s): no problems\n",
        "",
    )


def test_a_file_that_is_not_a_catalog_is_one_line(tmp_path):
    path = tmp_path / "catalog.yaml"
    path.write_text("models: [a, b]\n")
    code, out, _ = cli("catalog", "check", str(path), str(tmp_path / "absent.yaml"))
    assert code == 1
    lines = out.splitlines()
    assert lines[0].startswith(f"{path}: invalid catalog {path}: ")
    assert lines[1].startswith(f"{tmp_path / 'absent.yaml'}: cannot read catalog")


def test_without_a_file_the_servers_catalog_is_checked(tmp_path, monkeypatch):
    path = tmp_path / "served.yaml"
    path.write_text(yaml.safe_dump(MISTAKES["bad enum value"][0]))
    monkeypatch.setenv("UR_CATALOG_PATH", str(path))
    code, out, _ = cli("catalog", "check")
    assert code == 1
    assert out.startswith(f"{path}: minilm: option runtime")
    monkeypatch.delenv("UR_CATALOG_PATH")
    monkeypatch.setenv("UR_DATA_DIR", str(tmp_path / "data"))
    code, out, _ = cli("catalog", "check")
    assert code == 0, out
    assert out.startswith("1 catalog(s), ")
