"""The settings tables of docs/settings.md equal the ones generated from the settings models (every field,
its default and its description), for the shared settings, the server's and the standalone gateway's."""

from __future__ import annotations

import pytest

from gateway.settings import GatewaySettings
from service.settings import Settings
from service.shared.settings import SharedSettings
from tests.docs.settings_tables import PAGE, face_table, page_tables, shared_table, tables


@pytest.mark.parametrize("name", ["shared", "server", "gateway"])
def test_the_page_table_is_the_generated_one(name):
    generated = tables()[name]
    on_page = page_tables(PAGE.read_text())[name]
    assert on_page is not None, f"{PAGE.name} lacks the marker of the {name!r} settings table"
    assert on_page == generated, (
        f"{PAGE.name}'s {name!r} settings table differs from the models: run 'python -m tests.docs.settings_tables'"
    )


@pytest.mark.parametrize(("model", "prefix"), [(Settings, "UR_"), (GatewaySettings, "UR_GATEWAY_")])
def test_every_setting_of_a_face_has_a_row(model, prefix):
    """Each field has a row under the face's name, in the shared table or in the face's own."""
    column = 1 if prefix == "UR_" else 2  # the shared table names the server's variable, then the gateway's
    shared_rows = {line.split("|")[column].strip(" `") for line in shared_table().splitlines()}
    own_rows = {line.split("|")[1].strip(" `") for line in face_table(model, prefix).splitlines()}
    missing = [name for name in model.model_fields if f"{prefix}{name.upper()}" not in shared_rows | own_rows]
    assert not missing, f"settings without a row: {missing}"


def test_shared_settings_are_declared_once():
    """A face's model inherits the shared fields; it declares none of them again."""
    for model in (Settings, GatewaySettings):
        own = {
            name
            for klass in model.__mro__[: model.__mro__.index(SharedSettings)]
            for name in klass.__annotations__
        }
        assert not own & set(SharedSettings.model_fields), model


def test_the_log_level_and_api_key_are_settings_read_under_each_prefix(monkeypatch):
    monkeypatch.setenv("UR_LOG_LEVEL", "WARNING")
    monkeypatch.setenv("UR_API_KEY", "server-key")
    monkeypatch.setenv("UR_GATEWAY_LOG_LEVEL", "debug")
    monkeypatch.setenv("UR_GATEWAY_API_KEY", "gateway-key")
    server, gateway = Settings(), GatewaySettings()
    assert (server.log_level, server.api_key_value()) == ("warning", "server-key")
    assert (gateway.log_level, gateway.api_key_value()) == ("debug", "gateway-key")
    assert "server-key" not in repr(server)  # a secret, never shown


def test_a_bad_log_level_is_refused(monkeypatch):
    monkeypatch.setenv("UR_LOG_LEVEL", "loud")
    with pytest.raises(ValueError, match="log_level"):
        Settings()


def test_rewriting_the_page_fills_every_marked_table(tmp_path):
    from tests.docs.settings_tables import MARKER, rewrite_page

    page = tmp_path / "settings.md"
    page.write_text("".join(f"{MARKER.format(name)}\n| stale |\n\ntext\n" for name in tables()))
    rewrite_page(page)
    assert page_tables(page.read_text()) == tables()
    assert page.read_text().count("text\n") == 3


def test_the_server_command_refuses_a_bad_log_level_in_one_line(monkeypatch):
    from service import cli

    with pytest.raises(SystemExit) as stopped:
        cli.main(["--no-gateway", "--log-level", "loud"])
    assert str(stopped.value) == (
        "universal-runtime: UR_LOG_LEVEL: Input should be 'critical', 'error', 'warning', 'info' or 'debug'"
    )


def test_the_gateway_command_names_the_bad_setting_without_its_value(monkeypatch, capsys):
    from gateway import cli

    monkeypatch.setenv("UR_GATEWAY_API_KEY", "secret-key")
    monkeypatch.setenv("UR_GATEWAY_TLS_REFRESH_INTERVAL_S", "-1")
    with pytest.raises(SystemExit) as stopped:
        cli.load_settings([])
    assert stopped.value.code == 2
    error = capsys.readouterr().err
    assert "UR_GATEWAY_TLS_REFRESH_INTERVAL_S: Input should be greater than or equal to 0" in error
    assert "secret-key" not in error
