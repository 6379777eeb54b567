"""``python -m bench``: every area in turn (see ``AREAS``), same flags.

An area that fails is reported and the others still run; the exit status is 1 if any failed. An
area whose machine was not quiet (:mod:`bench.noise`) writes nothing and counts as failed.
"""

from __future__ import annotations

import sys
import time
import traceback

from bench import (
    admission,
    anomaly,
    backend_isolation,
    backend_memory,
    batch_api,
    documents,
    embeddings,
    encoder_runtimes,
    eviction,
    fairness,
    generation,
    gguf_quality,
    isolation,
    kv_pool_memory,
    memory,
    memory_estimate,
    metrics_cost,
    ocr,
    overhead,
    quota_accuracy,
    routing,
    speculative,
    speech,
)
from bench.runner import MachineNotQuietError

AREAS = {
    "overhead": overhead,
    "metrics_cost": metrics_cost,
    "embeddings": embeddings,
    "encoder_runtimes": encoder_runtimes,
    "generation": generation,
    "gguf_quality": gguf_quality,
    "memory": memory,
    "memory_estimate": memory_estimate,
    "kv_pool_memory": kv_pool_memory,
    "ocr": ocr,
    "speech": speech,
    "documents": documents,
    "anomaly": anomaly,
    "admission": admission,
    "isolation": isolation,
    "backend_isolation": backend_isolation,
    "backend_memory": backend_memory,
    "routing": routing,
    "eviction": eviction,
    "speculative": speculative,
    "quota_accuracy": quota_accuracy,
    "fairness": fairness,
    "batch_api": batch_api,
}


def main(argv: list[str] | None = None) -> int:
    """Run every area with ``argv`` (the common flags); return the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    start = time.monotonic()
    failed = []
    for name, module in AREAS.items():
        print(f"=== bench: {name} ===", file=sys.stderr, flush=True)
        try:
            module.main(argv)
        except MachineNotQuietError as exc:
            print(f"=== bench: {exc}", file=sys.stderr, flush=True)
            failed.append(name)
        except Exception:
            traceback.print_exc()
            failed.append(name)
    status = f"failed: {', '.join(failed)}" if failed else "all areas done"
    print(f"=== bench: {status} in {time.monotonic() - start:.0f}s ===", file=sys.stderr, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
