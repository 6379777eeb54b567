"""The settings a backend process runs with: the few server settings it needs, as JSON.

The server hands them over on the command line (``--settings-json``,
:func:`service.model_manager.backends.launcher.backend_settings_json`), so only what the backend
uses travels (:data:`~service.model_manager.backends.launcher.BACKEND_SETTINGS`). API keys, TLS
files, state stores and every other setting stay in the server.
"""

from __future__ import annotations

import json

from service.model_manager.backends.launcher import BACKEND_SETTINGS
from service.settings import Settings


def settings_from_json(text: str | None) -> Settings:
    """The backend's settings from its ``--settings-json`` value (None or empty: every default).

    Built with ``Settings.model_validate``: the values passed win over the process's ``UR_``
    environment variables (a field the server did not pass may still come from there). Fields outside
    :data:`BACKEND_SETTINGS` are dropped, so that a caller that passes a whole settings dump
    still hands the backend no secret.

    Raises:
        ValueError: ``text`` is not a JSON object, or a value is invalid (pydantic's
            ``ValidationError`` is a ValueError).

    """
    data = json.loads(text) if text else {}
    if not isinstance(data, dict):
        raise ValueError(f"--settings-json must be a JSON object, got {type(data).__name__}")
    return Settings.model_validate({k: v for k, v in data.items() if k in BACKEND_SETTINGS})
