"""CPython's cyclic garbage collector around model loads: no full collections while a load runs.

A full (generation 2) collection walks every tracked object that is not frozen and holds the GIL
while it does, so it stops every thread, the event loop's too. A load allocates hundreds of
thousands of objects (importing a backend, transformers reading a GGUF file's fields); the heap
grows by a quarter again and again, and each growth sets off another full collection over the
whole of it, while every other caller waits (see
docs/architecture/design-notes.md#garbage-collection-around-model-loads).

So while any load runs, full collections are off (:func:`full_collections_paused`): the oldest
generation's threshold is out of reach, while young collections go on as usual, a few
milliseconds each, freeing the cycles that die young (an import leaves some: ``torch.fx.wrap``
keeps its own frame, and through its callers the load's frames, the engine and, under
sentence-transformers' constructor, the model). When the last load ends, :func:`gc.freeze` moves
what survived (the imported modules, the model) out of the generations, as start-up does
(``service.cli``), so later full collections never walk it. The other ways (one young or one
full collection over all a load left) cost a long pause at every backend's first load.

A frozen object that becomes garbage is still freed when its last reference goes, which is how
engines end (their workers hold them weakly): :func:`reclaim_if_cyclic` checks that after an
unload, and collects the whole heap for an engine that a cycle still holds. Python's docs
describe the freeze (https://docs.python.org/3/library/gc.html#gc.freeze); vLLM freezes its
start-up heap the same way.

Every function here runs on the event loop thread (the load and unload paths of
:class:`service.model_manager.ModelManager`), so the count needs no lock.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import weakref
from collections.abc import Iterator

log = logging.getLogger(__name__)

#: The oldest generation's threshold while loads run: never reached (CPython compares its count of
#: younger collections with it, a C int).
UNREACHABLE_THRESHOLD = 2**31 - 1

_loads_running = 0
_thresholds: tuple[int, ...] = ()


@contextlib.contextmanager
def full_collections_paused() -> Iterator[None]:
    """No full collection during the ``with`` block; nests (loads of different models overlap).

    The block is bounded by the load it wraps (and garbage that only a full collection finds waits
    at most that long). When the last block ends: :func:`gc.freeze`, then the thresholds as they
    were before the first block.
    """
    global _loads_running, _thresholds
    if _loads_running == 0:
        _thresholds = gc.get_threshold()
        gc.set_threshold(_thresholds[0], _thresholds[1], UNREACHABLE_THRESHOLD)
    _loads_running += 1
    try:
        yield
    finally:
        _loads_running -= 1
        if _loads_running == 0:
            gc.freeze()
            gc.set_threshold(*_thresholds)


def reclaim_if_cyclic(engine: weakref.ref, name: str) -> bool:
    """Collect the whole heap when an unloaded engine is still alive; True when it was.

    ``engine`` refers to the engine after the model manager dropped its references. Alive then,
    it is held by a cycle that froze with it (freed only by a full collection of an unfrozen
    heap: :func:`gc.unfreeze`, :func:`gc.collect`, :func:`gc.freeze`, a pause as long as the
    full collections this module avoids), or by a live reference such as a library that kept the
    traceback of an exception caught while the load imported it (nothing frees that). Logged with
    ``name``, so such an engine can be fixed.
    """
    if engine() is None:
        return False
    log.warning(
        "unloaded engine still referenced after unload; collecting the whole heap", extra={"model": name}
    )
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    if engine() is not None:
        log.info("unloaded engine is held by a live reference", extra={"model": name})
    return True
