"""Shared state of the InferenceService mixins."""

from __future__ import annotations

from service.model_manager import ModelManager
from service.settings import Settings


class RpcBase:
    """What every InferenceService mixin needs: the model manager and the settings.

    Args:
        manager: the model manager engines are acquired from.
        settings: request limits (max_tokens, choices, inputs).

    """

    def __init__(self, manager: ModelManager, settings: Settings) -> None:
        self._manager = manager
        self._settings = settings
