"""The embedded default catalog's encoder entries point at installed packages and able backends."""

from __future__ import annotations

from engines.registry import engine_class
from engines.sources import resolve_source
from engines.types import Task
from service.catalog import load_catalog

ENCODER_TASKS = {Task.EMBED, Task.RERANK, Task.CLASSIFY, Task.EXTRACT_ENTITIES}


def test_encoder_entries_resolve_and_their_backends_serve_their_tasks():
    catalog = load_catalog().specs
    encoders = {name: spec for name, spec in catalog.items() if set(spec.tasks) & ENCODER_TASKS}
    assert {"all-minilm-l6-v2", "intent-clinc150", "en-core-web-sm"} <= set(encoders)
    assert set(catalog["all-minilm-l6-v2"].tasks) == {Task.EMBED, Task.RERANK, Task.CLASSIFY}
    for spec in encoders.values():
        assert set(spec.tasks) <= engine_class(spec.backend).tasks
        assert resolve_source(spec.source).path is not None
        embedding_source = spec.options.get("embedding_source")
        if embedding_source:
            assert resolve_source(embedding_source).path is not None
