"""One Hugging Face model built at a time in this process.

transformers' ``from_pretrained`` changes process-wide state while it builds a model and puts
back what it saved on the way out: ``transformers.initialization.no_tie_weights`` replaces
``PreTrainedModel.tie_weights`` with a no-op, ``no_init_weights`` replaces torch's init functions.
Two builds at once, on two models' lanes, each save the other's replacement as "the original", so
the later one to finish leaves ``tie_weights`` a no-op for the rest of the process: every model
built afterwards lacks its tied weights (``lm_head.weight`` MISSING in transformers' load report,
then "Cannot copy out of meta tensor" when it moves to its device; see
docs/architecture/design-notes.md#one-transformers-build-at-a-time).

So every engine builds its transformers or sentence-transformers model inside
:func:`hf_construction`: builds wait for one another (a load takes seconds; the forward passes
after it are not held). Reentrant, for a build that calls another (a pipeline around a model).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

_LOCK = threading.RLock()


@contextlib.contextmanager
def hf_construction() -> Iterator[None]:
    """Hold the process-wide lock of Hugging Face model builds for the ``with`` block (blocking)."""
    with _LOCK:
        yield
