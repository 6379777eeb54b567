"""Ids of the Batch API's files and batch jobs, the folder of each owner, and pages of ids.

Ids are ``file-``/``batch_`` and 24 characters: 12 hex digits of the creation time in
milliseconds, then 12 random letters and digits, so ids sort by age and a page (newest or oldest
first) is a slice of the sorted ids, with no reads. Every id a client sends is checked against its
form before it names a key, so no id reaches outside its folder.
"""

from __future__ import annotations

import re
import secrets
import string

from engines.errors import InvalidArgumentError, clip_text
from engines.owners import owner_segment
from engines.reasons import Reason

FILE_ID = re.compile(r"file-[0-9a-f]{12}[A-Za-z0-9]{12}")
BATCH_JOB_ID = re.compile(r"batch_[0-9a-f]{12}[A-Za-z0-9]{12}")

_ALNUM = string.ascii_letters + string.digits


def new_id(prefix: str, now: float) -> str:
    """``prefix`` + 12 hex digits of ``now`` in ms + 12 random letters and digits (sorts by age)."""
    return f"{prefix}{int(now * 1000):012x}{''.join(secrets.choice(_ALNUM) for _ in range(12))}"


def _check_id(value: str, pattern: re.Pattern[str], reason: str, what: str, field_name: str) -> str:
    if not pattern.fullmatch(value):
        raise InvalidArgumentError(
            f"{field_name}: {clip_text(value, 64)!r} is not a {what} id", reason=reason, field=field_name
        )
    return value


def check_file_id(value: str, field_name: str = "id") -> str:
    """``value`` if it has a file id's form, else INVALID_ARGUMENT INVALID_FILE_ID (no path tricks)."""
    return _check_id(value, FILE_ID, Reason.INVALID_FILE_ID, "file", field_name)


def check_batch_job_id(value: str, field_name: str = "id") -> str:
    """``value`` if it has a batch job id's form, else INVALID_ARGUMENT INVALID_BATCH_ID."""
    return _check_id(value, BATCH_JOB_ID, Reason.INVALID_BATCH_ID, "batch", field_name)


def owner_dir(owner: str) -> str:
    """The folder of a key's files and batch jobs (a hash: key names may be ``.`` or ``..``)."""
    return f"owners/{owner_segment(owner)}"


def page_limit(limit: int, most: int, default: int) -> int:
    """A page size: ``default`` for 0, else 1 to ``most`` (INVALID_ARGUMENT INVALID_PAGINATION)."""
    if limit == 0:
        return default
    if not 1 <= limit <= most:
        raise InvalidArgumentError(
            f"limit must be 1 to {most}, not {limit}", reason=Reason.INVALID_PAGINATION, field="limit"
        )
    return limit


def page_order(ids: list[str], after: str, newest_first: bool) -> list[str]:
    """``ids`` sorted by age in the order asked, from the one after ``after`` (ids sort by age)."""
    ids = sorted(ids, reverse=newest_first)
    if after:
        ids = [i for i in ids if (i < after if newest_first else i > after)]
    return ids
