"""Command-line flags both commands build alike (``universal-runtime``, ``universal-runtime-gateway``)."""

from __future__ import annotations

import argparse


def add_switch(parser: argparse.ArgumentParser, flag: str, help_text: str) -> None:
    """Add ``--flag`` and ``--no-flag``; when neither is given the value is ``None``.

    ``None`` leaves the choice to what stands behind the flag (an environment variable, a default):
    a ``store_true`` flag could not say "off" over an environment that says "on".
    """
    parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=help_text)
