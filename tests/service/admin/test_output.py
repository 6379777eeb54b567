"""How the CLI renders sizes, durations, expiry and tables."""

from __future__ import annotations

import io

from universal_runtime.v1 import model_service_pb2 as pb

from service.admin.models import expires_in, model_json
from service.admin.output import format_bytes, format_duration, write_table

NOW_MS = 1_800_000_000_000


def test_sizes_and_durations():
    assert [format_bytes(n) for n in (0, 512, 90_861_056, 3 << 30)] == ["-", "512 B", "86.7 MiB", "3.0 GiB"]
    assert [format_duration(s) for s in (-1, 0.2, 59, 61, 3_660)] == ["0s", "1s", "59s", "1m01s", "1h01m"]


def test_expiry_column():
    ready = {"status": pb.MODEL_STATUS_READY, "keep_alive": "5m0s"}
    assert expires_in(pb.Model(**ready, expires_at_unix_ms=NOW_MS + 90_000), NOW_MS) == "1m30s"
    assert expires_in(pb.Model(**ready, active_requests=2), NOW_MS) == "in use"
    assert expires_in(pb.Model(**ready, pinned=True), NOW_MS) == "never (pinned)"
    assert expires_in(pb.Model(status=pb.MODEL_STATUS_READY, keep_alive="-1"), NOW_MS) == "never"
    assert expires_in(pb.Model(status=pb.MODEL_STATUS_LOADING), NOW_MS) == "-"


def test_model_json_reports_seconds_left_or_null():
    model = pb.Model(name="m", tasks=[pb.TASK_EMBED, pb.TASK_RERANK], status=pb.MODEL_STATUS_READY)
    assert model_json(model, NOW_MS)["expires_in_s"] is None
    assert model_json(model, NOW_MS)["tasks"] == ["embed", "rerank"]
    model.expires_at_unix_ms = NOW_MS + 1_500
    assert model_json(model, NOW_MS)["expires_in_s"] == 1.5


def test_table_columns_are_aligned():
    out = io.StringIO()
    write_table(out, ("NAME", "SIZE"), [("a-long-name", "1"), ("b", "22")])
    assert out.getvalue() == "NAME          SIZE\na-long-name   1\nb             22\n"
