"""CPython's cyclic garbage collector around model loads: no full collections while a load runs.

A full (generation 2) collection walks every tracked object that is not frozen and holds the GIL
while it does, so it stops every thread, the event loop's too. A load allocates hundreds of
thousands of objects (importing a backend, transformers reading a GGUF file's fields); the heap
grows by a quarter again and again, and each growth sets off another full collection over the
whole of it. Measured here (2 cores), loading the embedded transformers model: 28 pauses over
50 ms, the longest 0.6 s, while every other caller waited.

So while any load runs, automatic collection is off (:func:`collector_paused`). When the last
load ends, everything the loads allocated is still in generation 0: a young collection over it
frees the cycles they left, if it is short (:data:`MAX_YOUNG_COLLECTION_OBJECTS`: a later load of
a backend, ~6,000 objects, ~1 ms); after a backend's first load, which imported it (~360,000
objects, 0.12-0.25 s a collection here), the few thousand cyclic objects that the import left
are kept instead. Then :func:`gc.freeze` moves what survived (the imported modules, the model)
out of the generations, as start-up does (``service.cli``), so later full collections never walk
it. A frozen object that becomes garbage is still freed when its last reference goes, which is
how engines end (their workers hold them weakly): :func:`reclaim_if_cyclic` checks that, and
collects the whole heap for an engine that a reference cycle still holds. Python's docs describe
the freeze (https://docs.python.org/3/library/gc.html#gc.freeze); vLLM freezes its start-up heap
the same way.

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

#: Largest generation 0 (objects, as :func:`gc.get_count` counts them) that a load's end collects:
#: ~20-35 ms of walking on the 2-core test machine, under the loop lag any request may cause.
MAX_YOUNG_COLLECTION_OBJECTS = 50_000

_loads_running = 0
_enabled_before = False


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Automatic collection off for the ``with`` block; nests (loads of different models overlap).

    The block is bounded by the load it wraps (and garbage made meanwhile waits at most that
    long). When the last block ends: a generation-0 collection if it is short (at most
    :data:`MAX_YOUNG_COLLECTION_OBJECTS`), then :func:`gc.freeze`, then automatic collection back
    on if it was on before the first block.
    """
    global _loads_running, _enabled_before
    if _loads_running == 0:
        _enabled_before = gc.isenabled()
        gc.disable()
    _loads_running += 1
    try:
        yield
    finally:
        _loads_running -= 1
        if _loads_running == 0:
            if gc.get_count()[0] <= MAX_YOUNG_COLLECTION_OBJECTS:
                gc.collect(0)
            gc.freeze()
            if _enabled_before:
                gc.enable()


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
