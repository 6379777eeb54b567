"""The encoder batch's time budget while several keys send work (``fair_batch_ms``), on a given clock.

Every time here is an argument: no sleeps, nothing timed. The batcher on a real model is in
``tests/engines/test_fair_share_models.py``.
"""

from __future__ import annotations

import pytest

from engines.batching.time_slice import CONTENTION_WINDOW_S, BatchTimeSlice
from engines.fair_share import Priority

LIVE, BULK = Priority.INTERACTIVE, Priority.BATCH


def timed(budget_ms: float = 20.0, seconds_per_token: float = 0.001) -> BatchTimeSlice:
    """A slice whose estimate is ``seconds_per_token`` (one batch observed)."""
    time_slice = BatchTimeSlice(budget_ms)
    time_slice.observe(seconds_per_token * 100, 100)
    return time_slice


def test_no_limit_with_one_key_before_a_batch_ran_or_with_slicing_off():
    time_slice = timed()
    time_slice.note_arrival(LIVE, "team-a", now=10.0)
    assert time_slice.token_limit(10.0) is None  # one key: batches as large as the limits allow
    unmeasured = BatchTimeSlice(20.0)
    unmeasured.note_arrival(LIVE, "team-a", now=10.0)
    unmeasured.note_arrival(LIVE, "team-b", now=10.0)
    assert unmeasured.token_limit(10.0) is None  # no batch ran: nothing to estimate from
    off = timed(budget_ms=0)
    off.note_arrival(LIVE, "team-a", now=10.0)
    off.note_arrival(LIVE, "team-b", now=10.0)
    assert off.token_limit(10.0) is None


def test_two_keys_within_the_window_cut_the_batch_at_the_budgets_tokens():
    time_slice = timed(budget_ms=20.0, seconds_per_token=0.001)
    time_slice.note_arrival(LIVE, "team-a", now=10.0)
    time_slice.note_arrival(LIVE, "team-b", now=10.5)
    assert time_slice.token_limit(10.5) == 20  # 0.020 s / 0.001 s a token
    assert time_slice.token_limit(10.0 + CONTENTION_WINDOW_S) == 20  # a's input is a second old
    assert time_slice.token_limit(10.01 + CONTENTION_WINDOW_S) is None  # only b's is recent


def test_a_keys_work_in_two_classes_contends_with_itself():
    time_slice = timed()
    time_slice.note_arrival(BULK, "team-a", now=10.0)
    time_slice.note_arrival(LIVE, "team-a", now=10.0)
    assert time_slice.token_limit(10.0) == 20


def test_the_first_input_always_runs_however_long():
    time_slice = timed(budget_ms=1.0, seconds_per_token=0.01)  # one token takes 10 budgets
    time_slice.note_arrival(LIVE, "team-a", now=0.0)
    time_slice.note_arrival(LIVE, "team-b", now=0.0)
    assert time_slice.token_limit(0.0) == 1


def test_silent_keys_are_forgotten():
    time_slice = timed()
    for index in range(100):
        time_slice.note_arrival(LIVE, f"key-{index}", now=float(index * 2))
    assert len(time_slice._last_arrival) == 1  # each was silent for 2 s when the next came


def test_the_estimate_averages_over_batches():
    time_slice = BatchTimeSlice(20.0)
    time_slice.observe(0.1, 100)
    assert time_slice.seconds_per_token == pytest.approx(0.001)
    time_slice.observe(0.2, 100)
    assert time_slice.seconds_per_token == pytest.approx(0.001 + 0.3 * 0.001)
    time_slice.observe(0.5, 0)  # an empty batch says nothing
    assert time_slice.seconds_per_token == pytest.approx(0.0013)


def test_cut_at_the_estimate_a_batch_with_a_fixed_cost_converges_to_the_budget():
    fixed_s, per_token_s = 0.005, 0.0002  # device time of a batch: 5 ms + 0.2 ms a padded token
    time_slice = BatchTimeSlice(25.0)
    time_slice.observe(fixed_s + per_token_s * 1024, 1024)  # a large first batch
    time_slice.note_arrival(LIVE, "team-a", now=0.0)
    time_slice.note_arrival(LIVE, "team-b", now=0.0)
    durations = []
    for _ in range(40):  # bounded: 40 batches
        tokens = time_slice.token_limit(0.0)
        duration = fixed_s + per_token_s * tokens
        durations.append(duration)
        time_slice.observe(duration, tokens)
    # The first estimate spreads the fixed cost over 1,024 tokens: the first cut runs over.
    assert durations[0] > 0.025 * 1.1
    assert durations[-1] == pytest.approx(0.025, rel=0.02)  # (25 - 5) ms / 0.2 ms = 100 tokens


def test_a_negative_budget_is_refused():
    with pytest.raises(ValueError, match="budget_ms must be >= 0"):
        BatchTimeSlice(-1.0)
