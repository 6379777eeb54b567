"""Garbage collection around model loads (service/garbage_collector.py).

A model's load must not hold the event loop with full collections: a load's allocations set
off full collections, one per quarter the heap grows, each walking the whole heap; and an engine
held in a cycle by its own scheduler or batcher is freed only by a full collection at unload (see
docs/architecture/design-notes.md#garbage-collection-around-model-loads). Loads run without full
collections and freeze what they leave; engines end when their last reference goes.
"""

from __future__ import annotations

import gc
import weakref

import pytest

from engines.executor import ExecutorPool
from service import garbage_collector
from service.catalog import load_catalog
from service.garbage_collector import UNREACHABLE_THRESHOLD, full_collections_paused
from service.model_manager import ModelManager
from service.settings import Settings


class _Cycle:
    """An object in a reference cycle with itself: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def collector_on():
    """Automatic collection on (as in a server) for the test, whatever the session set."""
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_no_full_collection_while_loads_run_and_thresholds_back_after_the_last(collector_on):
    thresholds = gc.get_threshold()
    with full_collections_paused():
        assert gc.get_threshold() == (thresholds[0], thresholds[1], UNREACHABLE_THRESHOLD)
        with full_collections_paused():  # a second model loading meanwhile
            pass
        assert gc.get_threshold()[2] == UNREACHABLE_THRESHOLD, "the first load still runs"
        assert gc.isenabled(), "young collections must go on"
    assert gc.get_threshold() == thresholds


def test_cycles_that_die_young_during_a_load_are_freed(collector_on):
    """An import's cycles (a frame that keeps itself, with its callers) die young: the automatic
    young collections that a load's allocations set off free them, no full collection needed."""
    with full_collections_paused():
        garbage = _Cycle()
        dead = weakref.ref(garbage)
        del garbage
        allocations = [[] for _ in range(10 * gc.get_threshold()[0])]  # sets off young collections
        assert dead() is None, "a young cycle outlived the young collections"
        del allocations
    gc.unfreeze()


def test_what_a_load_leaves_is_frozen(collector_on):
    frozen = gc.get_freeze_count()
    with full_collections_paused():
        survivors = [[] for _ in range(100)]
    assert gc.get_freeze_count() >= frozen + len(survivors), "the load's survivors were not frozen"
    del survivors
    gc.unfreeze()


def test_an_engine_held_after_unload_is_reported(collector_on, caplog):
    engine = _Cycle()
    ref = weakref.ref(engine)
    del engine
    gc.freeze()
    assert garbage_collector.reclaim_if_cyclic(ref, "m") is True
    assert ref() is None, "the full collection did not free the cycle"
    assert "still referenced after unload" in caplog.text
    assert garbage_collector.reclaim_if_cyclic(ref, "m") is False
    gc.unfreeze()


#: One model of each family whose workers call back into the engine: the generation scheduler
#: (both generation backends) and the encoder batcher.
MODELS = ["smollm2-135m-instruct", "smollm2-135m-instruct-hf", "all-minilm-l6-v2"]


@pytest.mark.parametrize("name", MODELS)
async def test_an_unloaded_engine_ends_with_its_last_reference(tmp_path, monkeypatch, name):
    """No cycle holds an engine after unload: it ends with its last reference, on its first load
    (which imports the backend) and on a later one, with no full collection.

    Found with the GPU: 36 MB of a small model stayed reserved on CUDA after unload, because a
    cycle that an import left (``torch.fx.wrap`` keeps its own frame, and through its callers the
    load's frames, the engine and, under sentence-transformers' constructor, the model) was frozen
    with the load; and the unload job itself still held the engine when the manager looked.
    """
    held: list[tuple[bool, bool]] = []  # per unload: alive before, alive after the reclaim
    ours: list[weakref.ref] = []  # this manager's engines, one per load

    def recording(ref: weakref.ref, model: str) -> bool:
        # Other managers in this process (a session server's reaper unloading an idle model of the
        # same name) release engines too; only this manager's count. The manager's weakref.ref of
        # a live engine is the very ref taken below (CPython shares a callback-free ref).
        if not any(ref is mine for mine in ours):
            return garbage_collector.reclaim_if_cyclic(ref, model)
        before = ref() is not None
        garbage_collector.reclaim_if_cyclic(ref, model)
        held.append((before, ref() is not None))
        return before

    monkeypatch.setattr("service.model_manager.residency.reclaim_if_cyclic", recording)
    catalog = load_catalog()
    executors = ExecutorPool()
    manager = ModelManager({name: catalog.specs[name]}, Settings(data_dir=tmp_path), executors)
    try:
        for _ in range(2):
            await manager.load(name)
            ours.append(weakref.ref(manager.get(name).engine))
            await manager.unload(name)
    finally:
        await manager.close()
        executors.shutdown(wait=True)
        gc.unfreeze()
    assert held == [(False, False), (False, False)], f"{name}'s engine outlived its unload: {held}"
