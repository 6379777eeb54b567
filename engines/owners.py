"""Who owns a stored object, and where each owner's objects live in the state store.

An owner is the name of the API key that stored the object (``""`` on a server without keys).
Key names are 1-64 characters of ``[A-Za-z0-9._-]``, which allows ``.`` and ``..``: a name is
never a path segment itself, only the first 32 hex digits of its SHA-256 (:func:`owner_segment`).

Custom classifiers and anomaly detectors (:class:`OwnedStores`) have two namespaces:

* the **shared** one, the kind's folder as older versions wrote it (``classifiers/``,
  ``anomaly/``): what an admin key fitted as shared, what a server without keys fits (its one
  caller owns everything), and every object written before owners existed. Every key may read and
  use it; only admin keys may write or delete in it (the caller checks that).
* one **per key**, ``owners/<segment>/<kind>/`` at the top of the state store: outside the
  shared folder, so no name in it (a classifier called ``owners``) can reach a key's folder.
  Names are unique per owner; each owner's folder has its own quota.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from engines.state_store import StateStore

S = TypeVar("S")

OWNERS_DIR = "owners"
"""Top-level folder of the state store holding each key's own classifiers and detectors."""


def owner_segment(owner: str) -> str:
    """The folder name of ``owner``'s objects: 32 hex digits of the SHA-256 of its UTF-8 name.

    A hash, not the name: names may be ``.`` or ``..``, and a hash has one fixed, safe form in
    every store.
    """
    return hashlib.sha256(owner.encode()).hexdigest()[:32]


class OwnedStores(Generic[S]):
    """The shared store of one kind of object and one store per owner, each made on first use.

    Args:
        state: the state store's root.
        kind: the kind's folder name (``"classifiers"``): the shared store is ``state/kind``, an
            owner's ``state/owners/<segment>/kind``.
        make: builds a store (a :class:`~engines.classification.custom.ClassifierStore`, a
            :class:`~engines.anomaly.store.DetectorStore`) over a folder.

    The per-owner stores are kept (each holds a cache of loaded objects): at most one per key
    name that authenticated a call, so bounded by the keys file.

    """

    def __init__(self, state: StateStore, kind: str, make: Callable[[StateStore], S]) -> None:
        self._state = state
        self._kind = kind
        self._make = make
        self.shared: S = make(state.child(kind))
        self._owned: dict[str, S] = {}
        self._lock = threading.Lock()

    def of(self, owner: str) -> S:
        """The store of ``owner``'s own objects; the shared store for ``""`` (a server without keys)."""
        if not owner:
            return self.shared
        with self._lock:
            store = self._owned.get(owner)
            if store is None:
                folder = self._state.child(f"{OWNERS_DIR}/{owner_segment(owner)}/{self._kind}")
                store = self._owned[owner] = self._make(folder)
            return store

    def target(self, owner: str, shared: bool) -> tuple[S, bool]:
        """The store a write (fit, overwrite, delete) of ``owner`` acts on, and whether it is the shared one.

        The shared store when ``shared`` is asked (the caller checks the key may) or ``owner`` is
        ``""`` (a server without keys); else the owner's own.
        """
        if shared or not owner:
            return self.shared, True
        return self.of(owner), False

    def visible(self, owner: str) -> list[tuple[S, bool]]:
        """The stores ``owner`` reads, in lookup order, each with whether it is the shared one.

        The owner's own first (its names shadow shared ones of the same name), then the shared
        store; only the shared store for ``""``.
        """
        if not owner:
            return [(self.shared, True)]
        return [(self.of(owner), False), (self.shared, True)]
