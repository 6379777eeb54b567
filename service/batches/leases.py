"""Leases of batch jobs: which replica's runner runs a job, and until when.

Keys, under the state store's ``batches/`` folder: ``leases/<batch_id>`` names the holder and
when its lease expires. Taking and renewing are compare-and-swaps, so two replicas never run one
job; a holder that died stops renewing, and its lease is taken over once expired.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from engines.state_store import StateStore


class LeaseStore:
    """Batch jobs' leases in a state store folder (see the module's keys).

    Args:
        state: the folder (the Batch API's, ``state.child("batches")``).
        clock: seconds since the epoch (tests move time forward).

    """

    def __init__(self, state: StateStore, clock: Callable[[], float] = time.time) -> None:
        self.state = state
        self.clock = clock

    def take(self, batch_id: str, holder: str, lease_s: float) -> bool:
        """Hold ``batch_id``'s lease until ``lease_s`` from now: renew it, or take it if free or expired.

        Returns:
            False when another holder's lease has not expired (or it won a race for it).

        """
        key = f"leases/{batch_id}"
        current = self.state.read_tagged(key)
        now = self.clock()
        if current is not None:
            lease = json.loads(current.data)
            if lease["holder"] != holder and lease["expires_at"] > now:
                return False
        data = json.dumps({"holder": holder, "expires_at": now + lease_s}).encode()
        return self.state.swap(key, data, current)

    def release(self, batch_id: str, holder: str) -> None:
        """Give the lease up at once (an expired lease in its place), if ``holder`` still holds it."""
        key = f"leases/{batch_id}"
        current = self.state.read_tagged(key)
        if current is not None and json.loads(current.data)["holder"] == holder:
            self.state.swap(key, json.dumps({"holder": "", "expires_at": 0}).encode(), current)

    def drop(self, batch_id: str) -> None:
        """Delete a batch job's lease, whoever holds it (the job ended)."""
        self.state.delete(f"leases/{batch_id}")
