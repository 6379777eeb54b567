"""The API keys of the ownership tests, and helpers for calls made with them.

``ops`` has role admin; ``team-a`` and ``team-b`` role user (one in each form of the keys file);
``..`` role user too: a name that would climb out of a folder if it were ever a path segment.
"""

from __future__ import annotations

import grpc
import pytest

from tests.conftest import error_info

ADMIN = "ops-Secret-owners-0000"
TEAM_A = "teamA-Secret-owners-0001"
TEAM_B = "teamB-Secret-owners-0002"
DOTS = "dots-Secret-owners-0003"

KEYS_FILE = f"""
ops: {{key: "{ADMIN}", role: admin}}
team-a: "{TEAM_A}"
team-b: {{key: "{TEAM_B}", role: user}}
"..": "{DOTS}"
"""


def bearer(key: str) -> tuple[tuple[str, str], ...]:
    """gRPC metadata of a call with ``key``."""
    return (("authorization", f"Bearer {key}"),)


def headers(key: str) -> dict[str, str]:
    """HTTP headers of a gateway request with ``key``."""
    return {"authorization": f"Bearer {key}"}


async def refused(call, code: grpc.StatusCode) -> tuple[str, dict[str, str]]:
    """The ErrorInfo reason and metadata of ``call``, which must fail with ``code``."""
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    assert caught.value.code() == code, caught.value.details()
    info = error_info(caught.value)
    return info.reason, dict(info.metadata)
