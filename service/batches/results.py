"""Batch jobs' per-line results, and the output and error files written from them.

Keys, under the state store's ``batches/`` folder: ``results/<batch_id>/<first index>-<count>-<random>``
holds the results of lines that completed together (JSON lines with each line's ``index``;
:class:`~service.batches.lines.LineResult`), saved as they complete (a group commit: one durable
write for every line that completed while the previous write ran), so a resumed run skips the
lines that have one. The output is built per input line, so it holds each ``custom_id`` exactly
once; the results are deleted once the output files are written.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from engines.state_store import StateStore
from service.batches.files import PURPOSE_OUTPUT, FileInfo, FileStore
from service.batches.lines import InputLine, LineResult, output_line
from service.batches.records import BatchJob


@dataclass(frozen=True, slots=True)
class OutputFiles:
    """What finalizing a batch job wrote.

    Attributes:
        output_file_id: the file of 2xx answers, or "" when no line got one.
        error_file_id: the file of the other lines, or "" when there were none.
        completed: lines answered 2xx.
        failed: lines that ran and were answered otherwise or failed to run.

    """

    output_file_id: str
    error_file_id: str
    completed: int
    failed: int


class ResultStore:
    """Batch jobs' line results in a state store folder (see the module's keys).

    Args:
        state: the folder (the Batch API's, ``state.child("batches")``).
        files: the same folder's files (the output and error files are written there).
        clock: seconds since the epoch (tests move time forward).

    """

    def __init__(self, state: StateStore, files: FileStore, clock: Callable[[], float] = time.time) -> None:
        self.state = state
        self.files = files
        self.clock = clock

    def put(self, batch_id: str, results: dict[int, LineResult]) -> None:
        """Save the results of lines that completed together, by line index (one new key).

        A group commit: one durable write (two flushes on a local disk) covers every line
        that completed while the previous write ran, instead of one write per line.
        """
        lines = [
            json.dumps({"index": index, **json.loads(results[index].to_json())}) for index in sorted(results)
        ]
        name = f"{min(results):09d}-{len(results)}-{secrets.token_hex(6)}"  # unique: never overwrites
        self.state.create(f"results/{batch_id}/{name}", "\n".join(lines).encode())

    def saved(self, batch_id: str) -> dict[int, LineResult]:
        """Every saved result of a batch job, by line index.

        A line saved twice (by two runners that both believed they held the lease) counts once:
        the save whose key sorts first.
        """
        found: dict[int, LineResult] = {}
        for key in sorted(self.state.sizes(f"results/{batch_id}")):  # bounded by its lines
            data = self.state.read(key) if key.rpartition("/")[2][:1].isdigit() else None
            for text in (data or b"").splitlines():  # bounded: the lines of one group
                index = json.loads(text)["index"]
                found.setdefault(int(index), LineResult.from_json(text))
        return found

    def write_outputs(self, job: BatchJob, lines: list[InputLine], missing: tuple[str, str]) -> OutputFiles:
        """Write a batch job's output file (2xx answers) and error file (the rest), in input order.

        Each of ``lines`` appears exactly once in one of them; a line without a result gets an
        error line with ``missing`` (code, message). The files get the job's planned ids and
        are written only if absent, so a finalize resumed after a crash writes the same files.
        They expire ``job.output_expires_after_s`` after they are written (OpenAI anchors
        ``output_expires_after`` on the file's creation, not the batch's).
        """
        results = self.saved(job.id)
        good: list[bytes] = []
        bad: list[bytes] = []
        failed = 0
        for line in lines:  # bounded by the input's lines
            result = results.get(line.index)
            (good if result is not None and result.ok else bad).append(
                output_line(job.id, line, result, missing)
            )
            failed += result is not None and not result.ok
        now = int(self.clock())
        ids = []
        for file_id, kind, chunk in (
            (job.planned_output_file_id, "output", good),
            (job.planned_error_file_id, "error", bad),
        ):
            if not chunk:
                ids.append("")
                continue
            data = b"".join(chunk)
            info = FileInfo(
                file_id,
                len(data),
                now,
                f"{job.id}_{kind}.jsonl",
                PURPOSE_OUTPUT,
                len(chunk),
                now + job.output_expires_after_s,
            )
            self.files.write(job.owner, info, data)
            ids.append(file_id)
        return OutputFiles(ids[0], ids[1], len(good), failed)

    def drop(self, batch_id: str) -> None:
        """Delete every saved result of a batch job."""
        for key in self.state.sizes(f"results/{batch_id}"):  # bounded by its lines
            self.state.delete(key)
