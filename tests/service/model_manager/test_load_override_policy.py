"""What a LoadModel caller may override: bounded numbers, booleans and enums, never a file.

A pickle whose unpickling writes a marker file is planted, then named through every option of every
backend the default catalog serves, as an absolute path and as a ``../`` path: each load is refused
before anything is read, and the marker never appears. Catalog file options resolve inside their
model's folder (symlinks followed), and a pickled head loads only from an installed package.
Non-finite numbers and values past a caller's bound are INVALID_ARGUMENT naming the option, and a
refused load leaves every listing working.
"""

from __future__ import annotations

import os
import pickle
import types
import typing
from pathlib import Path

import grpc
import pytest
import yaml
from google.protobuf import struct_pb2
from universal_runtime.v1 import model_service_pb2 as m
from universal_runtime.v1 import model_service_pb2_grpc

from engines.base import ModelSpec
from engines.device import cpu_threads
from engines.errors import InvalidArgumentError, ModelLoadError
from engines.options import load_override, refuse_operator_options
from engines.registry import engine_class, registered_backends
from engines.types import Task
from service.server import start_server
from service.settings import Settings
from tests.conftest import GGUF_SOURCE, MINILM_SOURCE, error_info

HUGE = "huge-context-gguf"
DEFAULT_CATALOG = Path(__file__).parents[3] / "service" / "default_catalog.yaml"


class _Planted:
    """Unpickling this writes ``path``: proof that a load ran a client-named pickle."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (Path.write_text, (Path(self.path), "pwned"))


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> tuple[Path, Path]:
    """A pickle file outside every model folder, and the marker its unpickling would write."""
    folder = tmp_path_factory.mktemp("planted")
    marker = folder / "marker"
    payload = folder / "head.joblib"
    payload.write_bytes(pickle.dumps(_Planted(str(marker))))
    return payload, marker


@pytest.fixture(scope="module")
async def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("override-policy")
    catalog = yaml.safe_load(DEFAULT_CATALOG.read_text())
    # An operator's huge context: its estimate passes 2^63 bytes, and listings must still work.
    catalog["models"][HUGE] = {
        "tasks": ["generate"],
        "backend": "llama_cpp",
        "source": GGUF_SOURCE,
        "options": {"n_ctx": 10**15},
    }
    path = folder / "catalog.yaml"
    path.write_text(yaml.safe_dump(catalog))
    server = await start_server(
        Settings(
            grpc_port=0, metrics_port=0, catalog_path=path, data_dir=folder / "data", shutdown_grace_s=1.0
        )
    )
    yield server, catalog["models"]
    await server.stop(grace=1.0)


@pytest.fixture
async def models(server):
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server[0].port}") as channel:
        yield model_service_pb2_grpc.ModelServiceStub(channel)


def struct(values: dict) -> struct_pb2.Struct:
    result = struct_pb2.Struct()
    result.update(values)
    return result


async def refused(call) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return caught.value


def _all_options_models():
    return {name: cls.options_model for name, cls in registered_backends().items()}


def _leaves(annotation) -> list:
    """The types a field's annotation admits (unions and Annotated unwrapped)."""
    if typing.get_origin(annotation) is typing.Annotated:
        return _leaves(typing.get_args(annotation)[0])
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return [leaf for arg in typing.get_args(annotation) for leaf in _leaves(arg)]
    return [annotation]


def _upper_bound(model, name: str) -> float | None:
    """The ``maximum`` the options' JSON Schema gives option ``name`` (in any branch of a union)."""
    prop = model.model_json_schema()["properties"][name]
    found = [branch["maximum"] for branch in [prop, *prop.get("anyOf", ())] if "maximum" in branch]
    return min(found) if found else None


@pytest.mark.parametrize("backend", sorted(registered_backends()))
def test_only_bounded_numbers_booleans_and_enums_are_overridable(backend):
    model = _all_options_models()[backend]
    overridable = {name for name in model.model_fields if load_override(model, name) is not None}
    assert overridable, f"{backend}: a caller may override nothing at all"
    for name in overridable:
        field, mark = model.model_fields[name], load_override(model, name)
        leaves = [leaf for leaf in _leaves(field.annotation) if leaf is not type(None)]
        for leaf in leaves:
            is_enum = typing.get_origin(leaf) is typing.Literal
            assert leaf in (bool, int, float) or is_enum, f"{backend}.{name}: {leaf} is not a bounded kind"
            if leaf in (int, float):
                bound = mark.at_most if mark.at_most is not None else _upper_bound(model, name)
                assert mark.threads or bound is not None, f"{backend}.{name}: a number without a bound"
    for name, field in model.model_fields.items():
        leaves = _leaves(field.annotation)
        if any(leaf in (str, Path) for leaf in leaves):
            assert name not in overridable, f"{backend}.{name}: a text or path option is overridable"


async def test_a_planted_pickle_is_never_loaded_through_any_option(models, server, planted):
    payload, marker = planted
    catalog = server[1]
    relative = os.path.relpath(payload, Path.cwd())  # noqa: ASYNC240 (no I/O: path arithmetic)
    tried = 0
    for name, entry in catalog.items():
        if name == HUGE:
            continue
        options_model = _all_options_models()[entry["backend"]]
        for option in options_model.model_fields:
            if load_override(options_model, option) is not None:
                continue
            for value in (str(payload), f"../../../../../../../..{payload}", relative):
                request = m.LoadModelRequest(name=name, options=struct({option: value}))
                error = await refused(models.LoadModel(request))
                assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (name, option, error.details())
                reason = error_info(error).reason
                assert reason in ("OPTION_NOT_OVERRIDABLE", "INVALID_MODEL_OPTION"), (name, option, reason)
                assert error_info(error).metadata["field"].startswith(f"options.{option}"), error_info(error)
                tried += 1
    assert tried > 40  # every text option of eight backends, three spellings each
    assert not marker.exists()
    # A file path as the intent classifier's head: refused, never read.
    error = await refused(
        models.LoadModel(m.LoadModelRequest(name="intent-clinc150", options=struct({"head": str(payload)})))
    )
    assert error_info(error).reason == "OPTION_NOT_OVERRIDABLE"
    assert "head" in error.details() and "catalog" in error.details()
    assert not marker.exists()
    listed = await models.ListModels(m.ListModelsRequest())
    assert {model.name for model in listed.models} >= set(catalog)


def test_file_options_of_every_backend_are_operator_only():
    for backend, model in _all_options_models().items():
        for name in ("head", "label_map", "embedding_source", "gguf_file", "cache_dir", "draft_model"):
            if name in model.model_fields:
                with pytest.raises(InvalidArgumentError) as caught:
                    refuse_operator_options(model, {name: "x"}, backend=backend)
                assert caught.value.reason == "OPTION_NOT_OVERRIDABLE", (backend, name)


@pytest.mark.parametrize(
    ("options", "option"),
    [
        ({"n_ctx": float("nan")}, "n_ctx"),
        ({"n_ctx": float("inf")}, "n_ctx"),
        ({"n_ctx": float("-inf")}, "n_ctx"),
        ({"speculative": {"num_tokens": float("nan")}}, "speculative.num_tokens"),
        ({"reasoning": {"budgets": [1.0, float("inf")]}}, "reasoning.budgets[1]"),
    ],
)
async def test_non_finite_numbers_are_invalid_and_name_the_option(models, options, option):
    request = m.LoadModelRequest(name="smollm2-135m-instruct", options=struct(options))
    error = await refused(models.LoadModel(request))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    info = error_info(error)
    assert (info.reason, info.metadata["field"], info.metadata["option"]) == (
        "INVALID_MODEL_OPTION",
        f"options.{option}",
        option,
    )
    await models.ListModels(m.ListModelsRequest())  # still answers


@pytest.mark.parametrize(
    ("options", "option", "words"),
    [
        ({"n_ctx": 1e15}, "n_ctx", "at most 1048576"),
        ({"n_threads": 1e5}, "n_threads", f"at most the {cpu_threads()} CPUs"),
        ({"max_sequences": 300}, "max_sequences", "at most 256"),
        ({"max_queue_wait_s": 1e9}, "max_queue_wait_s", "at most 3600"),
    ],
)
async def test_numbers_past_a_callers_bound_are_refused_and_listing_still_works(
    models, options, option, words
):
    request = m.LoadModelRequest(name="smollm2-135m-instruct", options=struct(options))
    error = await refused(models.LoadModel(request))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (error_info(error).reason, error_info(error).metadata["option"]) == (
        "INVALID_MODEL_OPTION",
        option,
    )
    assert words in error.details()
    listed = await models.ListModels(m.ListModelsRequest())
    assert "smollm2-135m-instruct" in {model.name for model in listed.models}
    got = await models.GetModel(m.GetModelRequest(name="smollm2-135m-instruct"))
    assert got.model.status == m.MODEL_STATUS_NOT_LOADED


async def test_a_refused_load_of_a_huge_catalog_context_leaves_every_listing_working(models):
    error = await refused(models.LoadModel(m.LoadModelRequest(name=HUGE)))
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error.details()
    listed = await models.ListModels(m.ListModelsRequest())
    huge = next(model for model in listed.models if model.name == HUGE)
    assert huge.status == m.MODEL_STATUS_ERROR
    assert huge.required_memory.ram_bytes > 10**12  # the estimate, whole or at its ceiling
    got = await models.GetModel(m.GetModelRequest(name=HUGE))
    assert got.model.name == HUGE
    await models.UnloadModel(m.UnloadModelRequest(name=HUGE))


# Catalog file options: inside the model's folder, and a pickle only from an installed package.


def _head_spec(folder: Path, **options) -> ModelSpec:
    return ModelSpec(
        name="custom-head",
        backend="embedding_head",
        tasks=(Task.CLASSIFY,),
        source=str(folder),
        options={"embedding_source": MINILM_SOURCE, **options},
    )


def _skops_head(path: Path) -> None:
    import numpy as np

    from engines.classification.heads import dump_head, fit_logistic_head

    vectors = np.random.default_rng(0).normal(size=(8, 384)).astype(np.float32)
    head, _ = fit_logistic_head(vectors, ["a", "b"] * 4)
    path.write_bytes(dump_head(head))


@pytest.mark.parametrize("head", ["../outside.joblib", "/etc/passwd", "sub/../../outside.joblib"])
def test_a_catalog_head_outside_its_folder_is_refused(tmp_path, head):
    folder = tmp_path / "model"
    folder.mkdir()
    (tmp_path / "outside.joblib").write_bytes(b"x")
    with pytest.raises(ModelLoadError) as caught:
        engine_class("embedding_head").check_spec(_head_spec(folder, head=head))
    assert caught.value.reason == "MODEL_SOURCE_INVALID"
    assert caught.value.metadata["option"] == "head"


def test_a_symlink_out_of_the_folder_is_refused(tmp_path, planted):
    payload, marker = planted
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "head.skops").symlink_to(payload)
    with pytest.raises(ModelLoadError) as caught:
        engine_class("embedding_head").check_spec(_head_spec(folder, head="head.skops"))
    assert caught.value.reason == "MODEL_SOURCE_INVALID"
    assert not marker.exists()


def test_a_pickled_head_outside_an_installed_package_is_refused(tmp_path, planted):
    payload, marker = planted
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "head.joblib").write_bytes(payload.read_bytes())
    cls = engine_class("embedding_head")
    with pytest.raises(ModelLoadError) as caught:
        cls.check_spec(_head_spec(folder, head="head.joblib"))
    assert caught.value.reason == "MODEL_SOURCE_INVALID" and "skops" in caught.value.message
    engine = cls(_head_spec(folder, head="head.joblib"), "cpu", None)
    with pytest.raises(ModelLoadError):  # the load path checks again, whatever ran check_spec
        engine.load()
    assert not marker.exists()


def test_a_skops_head_inside_the_folder_passes_the_checks(tmp_path):
    folder = tmp_path / "model"
    (folder / "heads").mkdir(parents=True)
    _skops_head(folder / "heads" / "head.skops")
    engine_class("embedding_head").check_spec(_head_spec(folder, head="heads/head.skops"))


def test_the_installed_packages_pickled_head_still_loads():
    spec = ModelSpec(
        name="intent",
        backend="embedding_head",
        tasks=(Task.CLASSIFY,),
        source="pkg://rag_intent_classifier/models",
        options={"embedding_source": MINILM_SOURCE, "head": "LogisticRegression.joblib"},
    )
    engine_class("embedding_head").check_spec(spec)


@pytest.mark.parametrize("backend", ["rapidocr", "rapid_layout"])
def test_onnx_file_options_resolve_inside_the_folder(tmp_path, backend):
    folder = tmp_path / "model"
    folder.mkdir()
    option = "det_model" if backend == "rapidocr" else "model_file"
    task = Task.OCR if backend == "rapidocr" else Task.LAYOUT
    spec = ModelSpec(
        name="m", backend=backend, tasks=(task,), source=str(folder), options={option: "../x.onnx"}
    )
    engine = engine_class(backend)(spec, "cpu", None)
    with pytest.raises(ModelLoadError) as caught:
        engine.required_memory()
    assert caught.value.reason == "MODEL_SOURCE_INVALID"


def test_a_gguf_file_option_cannot_leave_its_folder(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "link.gguf").symlink_to("/etc/hostname")
    spec = ModelSpec(
        name="m",
        backend="transformers",
        tasks=(Task.GENERATE,),
        source=str(folder),
        options={"gguf_file": "link.gguf"},
    )
    with pytest.raises(ModelLoadError) as caught:
        engine_class("transformers").check_spec(spec)
    assert caught.value.reason == "MODEL_SOURCE_INVALID"
