"""The README's Settings tables list every setting of the server and of the standalone gateway."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.settings import ENV_PREFIX as GATEWAY_PREFIX
from gateway.settings import GatewaySettings
from service.settings import Settings

README = Path(__file__).resolve().parent.parent / "README.md"


def settings_section() -> str:
    text = README.read_text()
    return text[text.index("## Settings\n") : text.index("## Operate\n")]


@pytest.mark.parametrize(("model", "prefix"), [(Settings, "UR_"), (GatewaySettings, GATEWAY_PREFIX)])
def test_every_setting_has_a_row(model, prefix):
    section = settings_section()
    missing = [
        f"{prefix}{name.upper()}"
        for name in model.model_fields
        if f"| `{prefix}{name.upper()}` |" not in section
    ]
    assert not missing, f"README 'Settings' lacks rows for {missing}"
