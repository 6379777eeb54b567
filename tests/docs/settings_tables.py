"""The settings tables of docs/settings.md, generated from the settings models.

Three tables: what both faces share (:class:`service.shared.settings.SharedSettings`, under ``UR_``
and ``UR_GATEWAY_``), the server's own (:class:`service.settings.Settings`) and the standalone
gateway's own (:class:`gateway.settings.GatewaySettings`). Each table on the page follows a
marker line ``<!-- settings-table: NAME -->``; ``tests/docs/test_settings_doc.py`` checks they equal
what :func:`tables` makes. After changing a setting, rewrite them with::

    .venv/bin/python -m tests.docs.settings_tables
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from gateway.settings import ENV_PREFIX as GATEWAY_PREFIX
from gateway.settings import GatewaySettings
from service.settings import Settings
from service.shared.settings import SharedSettings

PAGE = Path(__file__).resolve().parents[2] / "docs" / "settings.md"
SERVER_PREFIX = "UR_"
MARKER = "<!-- settings-table: {} -->"
_BINARY_UNITS = (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))


def default_text(name: str, field: FieldInfo) -> str:
    """A field's default as the page shows it: ``unset``, a size in KiB/MiB/GiB, or the value in code."""
    value = field.default_factory() if field.default_factory is not None else field.default  # type: ignore[call-arg]
    if value is PydanticUndefined or value is None or value == "":
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if name.endswith("_bytes") and isinstance(value, int):
        for unit, size in _BINARY_UNITS:
            if value >= size and value % size == 0:
                return f"{value // size} {unit}"
    if isinstance(value, Path) and value.is_relative_to(Path.home()):
        return f"`~/{value.relative_to(Path.home())}`"
    if isinstance(value, dict):
        return f"`{value or '{}'}`"
    return f"`{value}`"


def _own_fields(model: type[SharedSettings]) -> list[str]:
    return [name for name in model.model_fields if name not in SharedSettings.model_fields]


def _describe(name: str, field: FieldInfo) -> str:
    if not field.description:
        raise AssertionError(f"setting {name} has no description")
    return field.description


def face_table(model: type[SharedSettings], prefix: str) -> str:
    """The table of a face's own settings (not the shared ones): variable, default, description."""
    rows = ["| setting | default | what |", "|---|---|---|"]
    for name in _own_fields(model):
        field = model.model_fields[name]
        rows.append(f"| `{prefix}{name.upper()}` | {default_text(name, field)} | {_describe(name, field)} |")
    return "\n".join(rows)


def shared_table() -> str:
    """The table of the settings both faces have: the server's variable, the gateway's, default, description."""
    rows = ["| server | standalone gateway | default | what |", "|---|---|---|---|"]
    for name, field in SharedSettings.model_fields.items():
        variable = name.upper()
        rows.append(
            f"| `{SERVER_PREFIX}{variable}` | `{GATEWAY_PREFIX}{variable}` | {default_text(name, field)} "
            f"| {_describe(name, field)} |"
        )
    return "\n".join(rows)


def tables() -> dict[str, str]:
    """Every generated table by its marker name."""
    return {
        "shared": shared_table(),
        "server": face_table(Settings, SERVER_PREFIX),
        "gateway": face_table(GatewaySettings, GATEWAY_PREFIX),
    }


def _table_after(marker: str) -> re.Pattern[str]:
    # The marker line, then the table: consecutive lines starting with '|'.
    return re.compile(rf"^{re.escape(marker)}\n((?:\|.*\n)*)", re.M)


def page_tables(text: str) -> dict[str, str | None]:
    """The page's table after each marker (``None`` where the marker is missing)."""
    found: dict[str, str | None] = {}
    for name in tables():
        match = _table_after(MARKER.format(name)).search(text)
        found[name] = None if match is None else match.group(1).rstrip("\n")
    return found


def rewrite_page(path: Path = PAGE) -> None:
    """Replace each marked table of the page with the generated one.

    Raises:
        ValueError: a marker is missing.

    """
    text = path.read_text()
    for name, table in tables().items():
        marker = MARKER.format(name)
        text, count = _table_after(marker).subn(lambda _m, m=marker, t=table: f"{m}\n{t}\n", text)
        if count != 1:
            raise ValueError(f"{path}: marker {marker!r} found {count} times, expected once")
    path.write_text(text)


if __name__ == "__main__":
    rewrite_page()
