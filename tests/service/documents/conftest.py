"""Tiny document models built once per test session (see tiny_models.py), offline."""

from __future__ import annotations

import os

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"  # every load here must work without a network


@pytest.fixture(scope="session")
def layoutlmv3_dirs(tmp_path_factory):
    """Folders of tiny LayoutLMv3 checkpoints by head: ``qa``, ``token``, ``sequence``."""
    from tests.service.documents.tiny_models import build_layoutlmv3

    root = tmp_path_factory.mktemp("layoutlmv3")
    return {head: build_layoutlmv3(root / head, head) for head in ("qa", "token", "sequence")}


@pytest.fixture(scope="session")
def donut_dir(tmp_path_factory):
    """Folder of a tiny Donut checkpoint (DonutSwin + MBart) with its DonutProcessor."""
    from tests.service.documents.tiny_models import build_donut

    return build_donut(tmp_path_factory.mktemp("donut") / "model")
