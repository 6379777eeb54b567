"""The order in which every queue that admits work serves it: priority classes, then fair share by key.

One :class:`FairQueue` sits in each queue that admits work: the generation scheduler's waiting
queue (:mod:`engines.generation.scheduler`), the encoder batcher's queue
(:mod:`engines.batching.batcher`) and the process lanes' turns (:class:`engines.process_lane.FairTurns`,
the OCR and layout lanes). Each queued item belongs to a :class:`~engines.fair_share.Share`
(the API key's name, its priority class and weight, read with
:func:`~engines.fair_share.current_share` when the work is enqueued).

Order:

1. **Strict priority between classes.** Every queued ``INTERACTIVE`` item is served before any
   ``BATCH`` item. Batch work therefore waits as long as interactive work keeps the queue busy;
   the queues' wait limits (``max_queue_wait_s``) bound how long, as for any queued item.
2. **Start-time fair queuing between keys within a class** (SFQ: P. Goyal, H. M. Vin, H. Cheng,
   "Start-time Fair Queueing: A Scheduling Algorithm for Integrated Services Packet Switching
   Networks", SIGCOMM 1996). Each key (a *flow*) has a finish tag ``F``; the class has a virtual
   time ``v``, the start tag of the item served last. An item of cost ``c`` from a flow of weight
   ``w`` gets the start tag ``S = max(v, F)`` and moves the flow's finish tag to ``F = S + c / w``;
   the item with the smallest start tag is served next (the earlier arrival among equal tags).
   Costs are what the queue spends on the item: tokens for an encoder input, one admission for a
   generation request, seconds of the lane for a lane job (charged when the job ends, SFQ's
   start tags needing only the *previous* item's cost).

Bounds (SFQ's, for this queue):

- *No key waits behind another key's backlog.* An item of a key with nothing queued gets ``S = v``,
  the smallest start tag in the class (every queued item has ``S >= v``), so it is served after at
  most one item of each other backlogged key (those whose tag equals ``v``; tags within a key
  strictly increase) and the work already running: a key's single request waits ~one turn of each
  other key, never behind another key's 1,000 queued requests.
- *Weights.* While two keys both have work queued, the work they are served is in the ratio of
  their weights, to within one item's cost of each (a key of weight 2 gets twice the tokens,
  admissions or lane seconds of a key of weight 1).
- *Within a key, first in first out* (its tags increase with arrival), so a queue of one key (a
  server without API keys: every call's key is "") is exactly the FIFO queue it was.

A full queue (the generation scheduler's ``max_waiting``) can give places to another key:
:meth:`FairQueue.push_out_victims` names the newest work of the least entitled key (longest
queue drop, by class first), which is refused as if it had come when the queue was full, so one
key filling every place does not refuse another key's single request. So do the encoder
batcher's ``max_queue`` (inputs; a victim is a whole request).

Memory: one entry per queued item, the queue owners' own size bounds (``max_queue``,
``max_waiting``) still hold; per-key state (the flow) is dropped as soon as its queue empties (and,
for a lane, its running job ends), so state is bounded by the keys with work queued. A key coming
back after its queue emptied starts at ``v`` again: it may gain at most one item's cost over a
flow kept forever, the price of that bound.

Not thread-safe: the owner serializes every call (the batcher with its lock, the scheduler and
the lanes on the event loop).
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from engines import metrics
from engines.fair_share import Priority, Share

T = TypeVar("T")


@dataclass(eq=False, slots=True)
class _Queued(Generic[T]):
    item: T
    share: Share
    flow: _Flow
    start: float  # SFQ start tag
    serial: int  # arrival order: the tie-break among equal tags
    enqueued_at: float  # time.monotonic()

    def order(self) -> tuple[float, int]:
        return self.start, self.serial


@dataclass(eq=False, slots=True)
class _Flow:
    """One key's queue in one class: its items in tag order and its finish tag."""

    key: tuple[Priority, str]
    weight: float
    finish: float
    items: deque = field(default_factory=deque)
    held: int = 0  # lane jobs of this flow running, whose cost is charged when they end


class FairQueue(Generic[T]):
    """A queue served in priority-class order, then by start-time fair queuing between keys.

    Items are compared by identity (an item is queued at most once). Its depth is read at scrape
    time (``ur_queue_depth``) and each served item's wait recorded (``ur_queue_wait_seconds``),
    under ``name`` (the model or lane), the share's key and its class.

    Args:
        name: the model or lane this queue admits work to (metrics label, logs).

    """

    def __init__(self, name: str = "") -> None:
        self.name = name
        self._flows: dict[tuple[Priority, str], _Flow] = {}
        self._where: dict[int, _Queued[T]] = {}  # id(item) -> its entry
        self._virtual: dict[Priority, float] = {}
        self._serials = itertools.count()
        # Items queued per (key, class), read by metrics scrapes from their thread.
        self._depths: dict[tuple[str, Priority], int] = {}
        metrics.track_queue_depth(self)

    def __len__(self) -> int:
        return len(self._where)

    def __bool__(self) -> bool:
        return bool(self._where)

    def __contains__(self, item: object) -> bool:
        return id(item) in self._where

    def __iter__(self) -> Iterator[T]:
        """The queued items in service order (see :meth:`ordered`)."""
        return iter(self.ordered())

    def push(
        self,
        item: T,
        share: Share,
        *,
        cost: float = 1.0,
        flow: str | None = None,
        now: float | None = None,
    ) -> None:
        """Queue ``item`` of ``share``, costing ``cost`` (tokens, admissions or seconds; >= 0).

        Args:
            item: the queued object (compared by identity).
            share: its owner (key, class, weight: the flow's weight becomes this share's).
            cost: what serving it spends, in the queue's unit (0: charged later with :meth:`charge`).
            flow: the fair-share identity when it is not ``share.key`` (a lane's callers without
                API keys: their addresses). Metrics name ``share.key`` only.
            now: its arrival (``time.monotonic()``), when earlier than now (admitted before it
                was prepared): wait limits and wait metrics count from it.

        Raises:
            ValueError: ``item`` is queued already, ``cost`` is negative or ``share.weight`` is not > 0.

        """
        if id(item) in self._where:
            raise ValueError("item is queued already")
        if cost < 0 or not share.weight > 0:
            raise ValueError(f"cost must be >= 0 and weight > 0 (cost={cost}, weight={share.weight})")
        key = (share.priority, share.key if flow is None else flow)
        state = self._flows.get(key)
        virtual = self._virtual.get(share.priority, 0.0)
        if state is None:
            state = self._flows[key] = _Flow(key, share.weight, virtual)
        state.weight = share.weight
        start = max(virtual, state.finish)
        state.finish = start + cost / share.weight
        now = time.monotonic() if now is None else now
        queued = _Queued(item, share, state, start, next(self._serials), now)
        state.items.append(queued)
        self._where[id(item)] = queued
        depth = (share.key, share.priority)
        self._depths[depth] = self._depths.get(depth, 0) + 1

    def ordered(self, priority: Priority | None = None) -> list[T]:
        """Queued items in service order (class, start tag, arrival), of one class or of all.

        Work: a merge of the flows' queues (each in tag order), O(n log flows).
        """
        return [queued.item for queued in self._ordered(priority)]

    def _ordered(self, priority: Priority | None = None) -> list[_Queued[T]]:
        flows = sorted(
            (f for f in self._flows.values() if f.items and (priority is None or f.key[0] == priority)),
            key=lambda f: f.key[0],
        )
        merged: list[_Queued[T]] = []
        for _, group in itertools.groupby(flows, key=lambda f: f.key[0]):  # bounded: 2 classes
            merged.extend(heapq.merge(*(f.items for f in group), key=_Queued.order))
        return merged

    def ordered_by_class(self) -> list[list[T]]:
        """Queued items in service order, one list per class with items (interactive first)."""
        by_class: dict[Priority, list[T]] = {}
        for queued in self._ordered():
            by_class.setdefault(queued.share.priority, []).append(queued.item)
        return list(by_class.values())

    def peek(self) -> T | None:
        """The item served next (first class with items, smallest start tag), or None when empty."""
        head = self._head()
        return None if head is None else head.item

    def _head(self) -> _Queued[T] | None:
        best: _Queued[T] | None = None
        for state in self._flows.values():  # bounded by the flows with items queued or held
            if state.items:
                queued = state.items[0]
                if best is None or (queued.share.priority, *queued.order()) < (
                    best.share.priority,
                    *best.order(),
                ):
                    best = queued
        return best

    def pop(self, *, hold: bool = False) -> T:
        """Remove and return the item served next; the class's virtual time moves to its start tag.

        Args:
            hold: keep its flow until :meth:`charge` settles the item's cost (a lane job whose
                cost is the time it runs).

        Raises:
            IndexError: the queue is empty.

        """
        head = self._head()
        if head is None:
            raise IndexError("pop from an empty FairQueue")
        self.take([head.item], hold=hold)
        return head.item

    def take(self, items: list[T], *, hold: bool = False) -> None:
        """Remove ``items`` as served (an encoder batch); virtual time moves to their smallest tag.

        Args:
            items: queued items; one not queued is ignored.
            hold: see :meth:`pop`.

        """
        taken = [q for q in (self._where.get(id(item)) for item in items) if q is not None]
        now = time.monotonic()
        first: dict[Priority, float] = {}
        for queued in taken:
            priority = queued.share.priority
            first[priority] = min(first.get(priority, queued.start), queued.start)
        for priority, start in first.items():  # v never goes back (tags queued are all >= v)
            self._virtual[priority] = max(self._virtual.get(priority, 0.0), start)
        for queued in taken:
            priority = queued.share.priority
            if hold:
                queued.flow.held += 1
            self._remove(queued)
            metrics.observe_fair_queue_wait(self.name, queued.share.key, priority, now - queued.enqueued_at)

    def charge(self, share: Share, cost: float, *, flow: str | None = None) -> None:
        """Settle the cost of a held item of ``share``'s flow (a lane job that ran ``cost`` seconds).

        The flow's finish tag and its queued items' start tags move by ``cost / weight``, as if
        the cost had been known when they were queued. Ends the hold (the flow is dropped when it
        has nothing queued or held).
        """
        state = self._flows.get((share.priority, share.key if flow is None else flow))
        if state is None or not state.held:
            return
        shift = max(0.0, cost) / state.weight
        state.finish += shift
        for queued in state.items:  # bounded by the flow's queued items
            queued.start += shift
        state.held -= 1
        self._drop_if_idle(state)

    def discard(self, item: T) -> bool:
        """Remove ``item`` unserved (its caller left, it expired); False when it was not queued."""
        queued = self._where.get(id(item))
        if queued is None:
            return False
        self._remove(queued)
        return True

    def remove_where(self, predicate: Callable[[T], bool]) -> list[T]:
        """Remove the items for which ``predicate`` holds, unserved; return them in service order.

        Work: one call of ``predicate`` per queued item.
        """
        removed = [q for q in self._ordered() if predicate(q.item)]
        for queued in removed:
            self._remove(queued)
        return [queued.item for queued in removed]

    def expire(self, now: float, limit_s: float) -> list[T]:
        """Remove the items queued more than ``limit_s`` seconds before ``now``, oldest first.

        Within a flow the oldest is at its head, so this looks at each flow's head until it is
        young enough: work bounded by the flows plus the items removed.
        """
        expired: list[_Queued[T]] = []
        for state in list(self._flows.values()):  # bounded by the flows
            while state.items and now - state.items[0].enqueued_at > limit_s:
                queued = state.items[0]
                expired.append(queued)
                self._remove(queued)
        expired.sort(key=lambda q: q.enqueued_at)
        return [queued.item for queued in expired]

    def oldest_enqueued_at(self) -> float | None:
        """Arrival (``time.monotonic()``) of the oldest queued item, or None when empty."""
        heads = [state.items[0].enqueued_at for state in self._flows.values() if state.items]
        return min(heads, default=None)

    def clear(self) -> list[T]:
        """Remove every item unserved; return them in service order."""
        return self.remove_where(lambda _: True)

    def push_out_victims(
        self,
        share: Share,
        *,
        count: int = 1,
        needed: int = 1,
        flow: str | None = None,
        group: Callable[[T], object] | None = None,
    ) -> list[T] | None:
        """The queued items to refuse so that ``count`` items of ``share`` get ``needed`` places, or None.

        Longest queue drop (B. Suter et al., "Design considerations for supporting TCP with
        per-flow queueing", INFOCOM 1998), by class first: victims are taken newest first from the
        flow that is the least entitled to its places (the lowest class, then the most items
        queued per unit of weight), a whole ``group`` at a time (one request's items: queued
        together, so adjacent in their flow), and only while that flow stays less entitled than
        the newcomer's would be with its ``count`` items (a lower class, or more items per
        weight). So a key never pushes out its own work, a full queue of one key refuses
        newcomers as before, and nothing is chosen unless ``needed`` places can be freed. Nothing
        is removed: the caller refuses the victims. Work: a pass over the flows per victim group,
        at most ``needed`` groups.
        """
        newcomer = self._flows.get((share.priority, share.key if flow is None else flow))
        mine = (share.priority, ((len(newcomer.items) if newcomer is not None else 0) + count) / share.weight)
        left = {state: len(state.items) for state in self._flows.values() if state.items}
        chosen: list[T] = []
        while len(chosen) < needed:  # bounded: each pass takes at least one item
            worst = max(left, key=lambda f: (f.key[0], left[f] / f.weight), default=None)
            if worst is None or worst is newcomer or (worst.key[0], left[worst] / worst.weight) <= mine:
                return None
            items, end = worst.items, left[worst]
            tag = group(items[end - 1].item) if group is not None else None
            start = end - 1
            while group is not None and start > 0 and group(items[start - 1].item) == tag:
                start -= 1  # bounded by the flow's items
            chosen.extend(items[i].item for i in range(start, end))
            left[worst] = start
            if not start:
                del left[worst]
        return chosen

    def depths(self) -> list[tuple[str, Priority, int]]:
        """``(key, priority, items queued)`` per key and class with items queued (for metrics scrapes).

        Safe from another thread: a copy of a dict, which the GIL makes atomic.
        """
        return [(key, priority, count) for (key, priority), count in list(self._depths.items())]

    def flow_count(self) -> int:
        """Flows (key and class pairs) with state now: those with items queued or held."""
        return len(self._flows)

    def _remove(self, queued: _Queued[T]) -> None:
        state = queued.flow
        if state.items and state.items[0] is queued:
            state.items.popleft()
        else:
            state.items.remove(queued)  # an encoder batch takes from the middle of a flow
        del self._where[id(queued.item)]
        depth = (queued.share.key, queued.share.priority)
        if self._depths[depth] > 1:
            self._depths[depth] -= 1
        else:
            del self._depths[depth]
        self._drop_if_idle(state)

    def _drop_if_idle(self, state: _Flow) -> None:
        if not state.items and not state.held and self._flows.get(state.key) is state:
            del self._flows[state.key]
