"""Reading deploy/Dockerfile: its instructions per stage, its build arguments and the environment it sets."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

DOCKERFILE = Path(__file__).resolve().parents[2] / "deploy" / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """Every instruction (keyword, arguments) in order, continuation lines joined and comments dropped."""
    found: list[tuple[str, str]] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if line.startswith("#") or (not line and not pending):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        keyword, _, rest = (pending + line).partition(" ")
        found.append((keyword.upper(), rest.strip()))
        pending = ""
    return found


def dockerfile_stages() -> list[list[tuple[str, str]]]:
    """Instructions (keyword, arguments) per stage; the global ARGs before the first FROM are left out."""
    stages: list[list[tuple[str, str]]] = []
    for keyword, rest in instructions():
        if keyword == "FROM":
            stages.append([])
        if stages:
            stages[-1].append((keyword, rest))
    return stages


def all_instructions(keyword: str) -> list[str]:
    return [rest for stage in dockerfile_stages() for kw, rest in stage if kw == keyword]


def dockerfile_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for rest in all_instructions("ENV"):
        for pair in shlex.split(rest):
            key, _, value = pair.partition("=")
            env[key] = value
    return env


def stage_env(stage: list[tuple[str, str]]) -> dict[str, str]:
    env: dict[str, str] = {}
    for keyword, rest in stage:
        if keyword == "ENV":
            env.update(pair.partition("=")[::2] for pair in shlex.split(rest))
    return env


def global_args() -> dict[str, str | None]:
    """The ARGs declared before the first FROM (the ones FROM may use): name to default, None if none."""
    args: dict[str, str | None] = {}
    for keyword, rest in instructions():
        if keyword == "FROM":
            break
        if keyword == "ARG":
            args.update(_arg(rest, args))
    return args


def stage_args(stage: list[tuple[str, str]]) -> dict[str, str | None]:
    """The ARGs a stage declares: name to default (global ARGs' ``${NAME}`` expanded), None if none."""
    args: dict[str, str | None] = {}
    for keyword, rest in stage:
        if keyword == "ARG":
            args.update(_arg(rest, global_args()))
    return args


def expand(text: str, args: dict[str, str | None]) -> str:
    """``text`` with ``${NAME}`` and ``$NAME`` of ``args`` replaced by their values (no value: empty)."""
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m.group(1) or m.group(2)) or "", text)


def _arg(rest: str, known: dict[str, str | None]) -> dict[str, str | None]:
    name, eq, default = rest.partition("=")
    return {name.strip(): expand(default, known) if eq else None}
