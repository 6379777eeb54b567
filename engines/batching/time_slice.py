"""Time slices of an encoder's lane while more than one key sends work (``fair_batch_ms``).

The batcher's fair queue (:mod:`engines.fair_queue`) puts another key's input in the next batch the
lane takes, but a batch on the lane is never interrupted, so that input still waits for the rest of
the batch running when it came and then for its own batch, which the busy key's inputs fill up to
``max_batch_size``. Start-time fair queuing bounds a flow's delay by the largest packet (Goyal, Vin
and Cheng, SIGCOMM 1996); here the packet is a batch, and a full batch takes a noticeable time on
the CPU (see docs/architecture/design-notes.md#time-slices-of-an-encoders-lane). So while inputs of
more than one key (or class) arrived in the last :data:`CONTENTION_WINDOW_S`, a batch is cut at
about ``fair_batch_ms`` milliseconds of device time: smaller batches, a little less throughput for
the busy key, and a wait of about two slices for the other one. With one key (every server without
API keys) batches stay as large as the limits allow.

Device time is estimated from the batches run so far: seconds per padded token (inputs times
the longest input's tokens), an exponential moving average over batches. A batch has a fixed
cost besides its tokens, which this estimate folds into the per-token figure; cut at the
estimate, a batch's duration still converges to the budget (a batch shorter than the budget
lowers the per-token estimate, a longer one raises it).

Not thread-safe: the batcher calls it with its lock held.
"""

from __future__ import annotations

import math

from engines.fair_share import Priority

#: Seconds for which a key counts as sending work after its last input arrived.
CONTENTION_WINDOW_S = 1.0
#: Weight of the newest batch in the seconds-per-token average.
SMOOTHING = 0.3


class BatchTimeSlice:
    """Most padded tokens per batch while several keys share a batcher, from ``budget_ms`` of device time.

    Args:
        budget_ms: device milliseconds per batch while keys contend; 0 turns slicing off.

    """

    def __init__(self, budget_ms: float) -> None:
        if budget_ms < 0:
            raise ValueError(f"budget_ms must be >= 0, not {budget_ms}")
        self.budget_s = budget_ms / 1000
        self._last_arrival: dict[tuple[Priority, str], float] = {}
        self._seconds_per_token: float | None = None

    @property
    def seconds_per_token(self) -> float | None:
        """The device seconds a padded token costs, averaged over the batches so far (None before one)."""
        return self._seconds_per_token

    def note_arrival(self, priority: Priority, key: str, now: float) -> None:
        """Record that inputs of ``key`` in class ``priority`` arrived at ``now`` (``time.monotonic()``).

        Keys silent for :data:`CONTENTION_WINDOW_S` are forgotten here, so the record holds at
        most the keys (and classes) that sent work within the window.
        """
        self._last_arrival[(priority, key)] = now
        if len(self._last_arrival) > 1:
            for flow, at in list(self._last_arrival.items()):  # bounded by the keys of the window
                if now - at > CONTENTION_WINDOW_S:
                    del self._last_arrival[flow]

    def observe(self, duration_s: float, padded_tokens: int) -> None:
        """Fold a batch that ran ``duration_s`` seconds over ``padded_tokens`` tokens into the estimate."""
        if padded_tokens <= 0 or duration_s < 0:
            return
        sample = duration_s / padded_tokens
        previous = self._seconds_per_token
        self._seconds_per_token = sample if previous is None else previous + SMOOTHING * (sample - previous)

    def contended(self, now: float) -> bool:
        """Whether inputs of more than one key (or class) arrived within the window before ``now``."""
        recent = sum(now - at <= CONTENTION_WINDOW_S for at in self._last_arrival.values())
        return recent > 1

    def token_limit(self, now: float) -> int | None:
        """Most padded tokens of the next batch planned at ``now``, or None for no limit.

        None when slicing is off, no batch has run yet, or only one key sent work within the
        window. Otherwise at least 1 (the batch's first input always runs, whatever its length).
        """
        per_token = self._seconds_per_token
        if not self.budget_s or per_token is None or not self.contended(now):
            return None
        if per_token <= 0:
            return None
        return max(1, math.floor(self.budget_s / per_token))
