"""Garbage collection around model loads (service/garbage_collector.py).

Found by CI (issue 29's stall probe, tests/fuzz/test_schema_fuzz.py): the first structured
request to the transformers model, which loads it, held the launched server's event loop 0.53 s.
Measured here: the load's allocations set off full collections, one per quarter the heap grew,
each walking the whole heap (28 pauses over 50 ms, the longest 0.6 s); and every unload ran a
full collection (0.26-0.39 s) because each engine was held in a cycle by its own scheduler or
batcher. Loads now run with automatic collection paused and freeze what they leave; engines end
when their last reference goes.
"""

from __future__ import annotations

import gc
import weakref

import pytest

from engines.executor import ExecutorPool
from service import garbage_collector
from service.catalog import load_catalog
from service.garbage_collector import MAX_YOUNG_COLLECTION_OBJECTS, collector_paused
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


def test_no_automatic_collection_while_loads_run_and_back_on_after_the_last(collector_on):
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():  # a second model loading meanwhile
            assert not gc.isenabled()
        assert not gc.isenabled(), "the first load still runs"
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off():
    was = gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        if was:
            gc.enable()


def test_a_short_load_frees_its_cycles_and_freezes_its_survivors(collector_on):
    frozen_before = gc.get_freeze_count()
    gc.collect(0)  # generation 0 starts small, as after a load that imported nothing
    with collector_paused():
        garbage = _Cycle()
        survivor = [object() for _ in range(100)]
        dead = weakref.ref(garbage)
        del garbage
    assert dead() is None, "the cycle the load left was not collected"
    assert gc.get_freeze_count() >= frozen_before + 1, "the load's survivors were not frozen"
    del survivor
    gc.unfreeze()


def test_a_load_that_allocated_much_skips_the_young_collection(collector_on):
    """A backend's first load (its imports) leaves a large generation 0: walking it would hold
    every thread for as long as the pauses this module removes, so its few cycles stay."""
    gc.collect(0)
    with collector_paused():
        garbage = _Cycle()
        dead = weakref.ref(garbage)
        del garbage
        kept = [[] for _ in range(MAX_YOUNG_COLLECTION_OBJECTS + 1_000)]
    assert dead() is not None, "a large generation 0 was walked at the load's end"
    del kept
    gc.unfreeze()
    gc.collect()
    assert dead() is None


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
    """No cycle holds an engine after unload, so the unload's collection walks only the young heap.

    The model loads twice: the first load may import a backend, and a module imported under a
    load can keep the traceback of an exception it caught, frames and engine included, for the
    life of the process (transformers' lazy modules do); the second load imports nothing.
    """
    held: list[bool] = []
    monkeypatch.setattr(
        "service.model_manager.reclaim_if_cyclic", lambda ref, _name: held.append(ref() is not None)
    )
    catalog = load_catalog()
    executors = ExecutorPool()
    manager = ModelManager({name: catalog.specs[name]}, Settings(data_dir=tmp_path), executors)
    try:
        for _ in range(2):
            await manager.load(name)
            await manager.unload(name)
    finally:
        await manager.close()
        executors.shutdown(wait=True)
        gc.unfreeze()
    assert held[1:] == [False], f"{name}'s engine outlived its unload (held: {held})"
