"""Fixtures of the batch tests: a clock the test moves, and a batch store on a temporary folder."""

from __future__ import annotations

import pytest

from tests.service.batches.helpers import Clock, make_store


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(tmp_path, clock):
    return make_store(tmp_path, clock)
