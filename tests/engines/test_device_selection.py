"""Choosing a device for a backend that does not run on torch never imports torch.

torch costs about 200 MB of RSS and seconds of start-up; a process that serves only GGUF, OCR
or spaCy models must not pay for it. Checked in a fresh interpreter (this one has torch loaded).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import yaml

from tests.conftest import GGUF_SOURCE

REPO = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import asyncio, json, sys
    from pathlib import Path
    import grpc
    from service.server import start_server
    from service.settings import Settings
    from universal_runtime.v1 import model_service_pb2 as m, model_service_pb2_grpc as ms

    async def main():
        settings = Settings(grpc_port=0, catalog_path=Path(sys.argv[1]), data_dir=Path(sys.argv[2]))
        running = await start_server(settings)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
                stub = ms.ModelServiceStub(channel)
                devices = {}
                for name in ("gguf", "ocr"):
                    devices[name] = (await stub.LoadModel(m.LoadModelRequest(name=name))).model.device
                    await stub.UnloadModel(m.UnloadModelRequest(name=name))
        finally:
            await running.stop(grace=0.5)
        print(json.dumps({"devices": devices, "torch": "torch" in sys.modules}))

    asyncio.run(main())
    """
)


def test_gguf_and_ocr_models_load_and_unload_without_torch(tmp_path):
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(
        yaml.safe_dump(
            {
                "models": {
                    "gguf": {"tasks": ["generate"], "backend": "llama_cpp", "source": GGUF_SOURCE},
                    "ocr": {"tasks": ["ocr"], "backend": "tesseract", "source": "system"},
                }
            }
        )
    )
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(catalog), str(tmp_path / "data")],
        cwd=REPO,
        # No bytecode: generated/ must stay exactly protoc's output (make protos-check).
        env={
            "PYTHONPATH": f"{REPO}:{REPO / 'generated'}",
            "PYTHONDONTWRITEBYTECODE": "1",
            "HF_HUB_OFFLINE": "1",
            "PATH": "/usr/bin:/bin",
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["devices"] == {"gguf": "cpu", "ocr": "cpu"}
    assert result["torch"] is False
