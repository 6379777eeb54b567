"""The progress bar of ``load``: ``WatchModel``'s status strings drawn with tqdm on stderr.

A load reports backend.go's status strings (``Installing: downloading 42%``, ``Installing:
converting``, ``Loading``, ``Running: llama_cpp on cpu``); the bar moves with the percentage of a
download and fills when the model runs, and its text is the status string.
"""

from __future__ import annotations

import re
from typing import TextIO

from tqdm import tqdm
from universal_runtime.v1 import model_service_pb2 as pb

#: A percentage inside a status string: ``42%`` or ``42.5%``.
_PERCENT = re.compile(r"(\d{1,3}(?:\.\d+)?)%")

#: Width of the bar, characters: fixed, so a log or a pipe gets the same line as a terminal.
BAR_COLUMNS = 24


def status_percent(detail: str) -> float | None:
    """The percentage a status string gives (``"Installing: downloading 42%"`` → 42.0), else None.

    The last one in the string counts; values over 100 are read as 100.
    """
    found = _PERCENT.findall(detail)
    return min(100.0, float(found[-1])) if found else None


class LoadProgress:
    """One model's load drawn as a bar on ``err`` (a terminal redraws it in place).

    Args:
        err: Where the bar goes (the command's stderr).
        name: The model's name, the bar's label.

    """

    def __init__(self, err: TextIO, name: str) -> None:
        self._name = name
        self._bar = tqdm(
            total=100,
            file=err,
            desc=name,
            bar_format=f"{{percentage:3.0f}}%|{{bar:{BAR_COLUMNS}}}| {{desc}}",
            leave=True,
            mininterval=0,  # each message is a change of status: draw every one
        )

    def show(self, model: pb.Model) -> None:
        """Draw ``model``'s state: the bar at its percentage (full once ready), its status string beside."""
        percent = 100.0 if model.status == pb.MODEL_STATUS_READY else status_percent(model.status_detail)
        if percent is not None:
            self._bar.n = percent
        self._bar.set_description_str(f"{self._name}: {model.status_detail}", refresh=False)
        self._bar.refresh()

    def close(self) -> None:
        """End the bar's line (it stays on screen)."""
        self._bar.close()
