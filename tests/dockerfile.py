"""Reading deploy/Dockerfile: its instructions per stage and the environment it sets."""

from __future__ import annotations

import shlex
from pathlib import Path

DOCKERFILE = Path(__file__).resolve().parent.parent / "deploy" / "Dockerfile"


def dockerfile_stages() -> list[list[tuple[str, str]]]:
    """Instructions (keyword, arguments) per stage, continuation lines joined and comments dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if line.startswith("#") or (not line and not pending):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        keyword, _, rest = (pending + line).partition(" ")
        instructions.append((keyword.upper(), rest.strip()))
        pending = ""
    stages: list[list[tuple[str, str]]] = []
    for keyword, rest in instructions:
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
