"""Key roles: ``role`` in the keys file, and model management for admin keys only.

A user key gets PERMISSION_DENIED (reason ADMIN_ROLE_REQUIRED) for LoadModel, UnloadModel and
WatchModel with ``load``, before anything is loaded or unloaded; it may still list, get and watch.
An admin key loads and unloads; a server without keys lets every call do everything; the single
key (``UR_API_KEY``) is the operator's, an admin.
"""

from __future__ import annotations

import contextvars

import grpc
import pytest
from pydantic import SecretStr
from universal_runtime.v1 import model_service_pb2 as m
from universal_runtime.v1 import model_service_pb2_grpc

from engines.errors import PermissionDeniedError
from engines.fair_share import Caller, caller_var
from service.server import start_server
from service.shared.api_keys import ApiKeyError, load_api_keys
from service.tasks.callers import is_admin, require_admin
from tests.service.ownership.keys import ADMIN, TEAM_A, TEAM_B, bearer, refused

MODEL = "minilm-ephemeral"  # the test catalog's entry for lifecycle tests; this server's alone


def test_the_keys_file_gives_each_key_its_role(keys_file):
    keys = load_api_keys("single-Secret-roles-9", keys_file)
    roles = {name: keys.policy(name).role for name in keys.names}
    assert roles == {"default": "admin", "ops": "admin", "team-a": "user", "team-b": "user", "..": "user"}


@pytest.mark.parametrize("value", ["root", "Admin", "", 1, True, "[admin]"])
def test_a_role_other_than_user_or_admin_is_refused_naming_the_key(tmp_path, value):
    path = tmp_path / "keys.yaml"
    path.write_text(f'svc: {{key: "svc-Secret-roles-1", role: {value!r}}}\n')
    with pytest.raises(ApiKeyError) as caught:
        load_api_keys(None, path)
    assert "key 'svc': field 'role' must be one of user, admin" in str(caught.value)
    assert "svc-Secret-roles-1" not in str(caught.value)


def test_require_admin_reads_the_calls_key_and_role():
    def run(name: str, role: str) -> bool:
        caller_var.set(Caller(name=name, role=role, lane=name))
        return is_admin()

    assert contextvars.copy_context().run(run, "", "")  # a server without keys: everything
    assert contextvars.copy_context().run(run, "ops", "admin")
    assert not contextvars.copy_context().run(run, "team-a", "user")
    assert not contextvars.copy_context().run(run, "team-a", "")  # no role set: not an admin

    def denied() -> None:
        caller_var.set(Caller(name="team-a", role="user", lane="team-a"))
        require_admin("LoadModel")

    with pytest.raises(PermissionDeniedError) as caught:
        contextvars.copy_context().run(denied)
    assert (caught.value.status, caught.value.reason) == ("PERMISSION_DENIED", "ADMIN_ROLE_REQUIRED")
    assert caught.value.metadata == {"action": "LoadModel", "key_name": "team-a"}


async def status(stubs, key: str = TEAM_A) -> int:
    return (await stubs.models.GetModel(m.GetModelRequest(name=MODEL), metadata=bearer(key))).model.status


async def test_a_user_key_cannot_load_unload_or_watch_with_load(stubs):
    for key in (TEAM_A, TEAM_B):
        for call, action in (
            (stubs.models.LoadModel(m.LoadModelRequest(name=MODEL), metadata=bearer(key)), "LoadModel"),
            (
                stubs.models.LoadModel(
                    m.LoadModelRequest(name="no-such-model", keep_alive="-1"), metadata=bearer(key)
                ),
                "LoadModel",
            ),
            (stubs.models.UnloadModel(m.UnloadModelRequest(name=MODEL), metadata=bearer(key)), "UnloadModel"),
        ):
            reason, metadata = await refused(call, grpc.StatusCode.PERMISSION_DENIED)
            assert (reason, metadata["action"]) == ("ADMIN_ROLE_REQUIRED", action)
        watch = stubs.models.WatchModel(m.WatchModelRequest(name=MODEL, load=True), metadata=bearer(key))
        reason, metadata = await refused(watch.read(), grpc.StatusCode.PERMISSION_DENIED)
        assert (reason, metadata["action"]) == ("ADMIN_ROLE_REQUIRED", "WatchModel with load")
    assert await status(stubs) == m.MODEL_STATUS_NOT_LOADED  # nothing was loaded
    # Listing, reading and watching without load stay every key's.
    listed = await stubs.models.ListModels(m.ListModelsRequest(), metadata=bearer(TEAM_A))
    assert MODEL in [model.name for model in listed.models]
    watched = [
        r async for r in stubs.models.WatchModel(m.WatchModelRequest(name=MODEL), metadata=bearer(TEAM_B))
    ]
    assert [r.model.status for r in watched] == [m.MODEL_STATUS_NOT_LOADED]


async def test_an_admin_key_loads_and_unloads_and_a_user_key_cannot_unload_it(stubs):
    loaded = await stubs.models.LoadModel(
        m.LoadModelRequest(name=MODEL, keep_alive="5m"), metadata=bearer(ADMIN), timeout=120
    )
    assert loaded.model.status == m.MODEL_STATUS_READY
    await refused(
        stubs.models.UnloadModel(m.UnloadModelRequest(name=MODEL, force=True), metadata=bearer(TEAM_A)),
        grpc.StatusCode.PERMISSION_DENIED,
    )
    assert await status(stubs) == m.MODEL_STATUS_READY
    unloaded = await stubs.models.UnloadModel(m.UnloadModelRequest(name=MODEL), metadata=bearer(ADMIN))
    assert unloaded.model.status in (m.MODEL_STATUS_NOT_LOADED, m.MODEL_STATUS_UNLOADING)
    watched = [
        r
        async for r in stubs.models.WatchModel(
            m.WatchModelRequest(name=MODEL, load=True, keep_alive="5m"), metadata=bearer(ADMIN), timeout=120
        )
    ]
    assert watched[-1].model.status == m.MODEL_STATUS_READY
    await stubs.models.UnloadModel(m.UnloadModelRequest(name=MODEL), metadata=bearer(ADMIN))


async def test_without_keys_every_call_may_load_and_with_the_single_key_too(settings, tmp_path):
    for update in ({}, {"api_key": SecretStr("single-Secret-roles-2")}):
        running = await start_server(settings.model_copy(update={"data_dir": tmp_path, **update}))
        metadata = bearer("single-Secret-roles-2") if update else ()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
                models = model_service_pb2_grpc.ModelServiceStub(channel)
                loaded = await models.LoadModel(
                    m.LoadModelRequest(name=MODEL, keep_alive="5m"), metadata=metadata, timeout=120
                )
                assert loaded.model.status == m.MODEL_STATUS_READY
                await models.UnloadModel(m.UnloadModelRequest(name=MODEL), metadata=metadata)
        finally:
            await running.stop(grace=1.0)
