"""The runnable code blocks of the documentation (README.md and docs/**/*.md), for tests/docs.

A block is collected when its fence's info string names a shell (``bash``, ``sh``, ``shell``,
``console``), Python (``python``, ``py``) or JavaScript (``js``, ``javascript``, ``ts``, ``node``);
other blocks (yaml, json, text, output) are not programs and are left out. docs/gen/ (generated
reference pages) holds no examples.

Tags: an HTML comment on the line right before the fence, invisible on the rendered page::

    <!-- example: needs kubernetes -->
    ```bash
    kubectl apply -k deploy/k8s/base
    ```

Several tags are separated by commas. :data:`TAGS` lists them and what each means.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

LANGUAGES = {
    **dict.fromkeys(("bash", "sh", "shell", "console"), "bash"),
    **dict.fromkeys(("python", "py"), "python"),
    **dict.fromkeys(("js", "javascript", "ts", "node"), "js"),
}

#: Tags a block may carry, and what they mean to the test.
TAGS = {
    # What CI lacks: the block is skipped with this reason.
    "needs gpu": "needs a GPU",
    "needs docker": "needs a container engine and a built image",
    "needs podman": "needs podman, buildah and debootstrap (root)",
    "needs kubernetes": "needs a Kubernetes cluster",
    "needs cloud": "needs cloud storage (S3/AWS) and its credentials",
    "needs network": "needs downloads (PyPI, Hugging Face Hub)",
    "needs time": "takes longer than one test may (a first-time set-up, the whole test suite)",
    "fragment": "a fragment of a program or a configuration, not a program",
    # How the block runs.
    "starts-server": "starts its own server: 'universal-runtime', 'universal-runtime-gateway' and "
    "'make serve' run in the background on free ports, ready before the next line",
    "repo-root": "runs in the repository's root instead of an empty directory",
    "continues": "goes on from the page's previous runnable block: both run in one directory, one "
    "after the other, with the servers the first started still running",
}

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\s`]*)")
_TAG = re.compile(r"^\s*<!--\s*example:\s*(?P<tags>.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Example:
    """One fenced code block: where it is, its language, its text (unindented) and its tags."""

    path: str  # relative to the repository root
    line: int  # 1-based line of the opening fence
    language: str  # bash, python or js
    code: str
    tags: frozenset[str]

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}"


def _unindent(lines: list[str], indent: str) -> str:
    return (
        "\n".join(line[len(indent) :] if line.startswith(indent) else line.lstrip() for line in lines) + "\n"
    )


def parse_tags(comment: str) -> frozenset[str]:
    """The tags of an ``<!-- example: ... -->`` line (empty for any other line).

    Raises:
        ValueError: a tag that :data:`TAGS` does not know.

    """
    match = _TAG.match(comment)
    if match is None:
        return frozenset()
    tags = frozenset(" ".join(tag.split()) for tag in match["tags"].split(",") if tag.strip())
    unknown = tags - TAGS.keys()
    if unknown:
        raise ValueError(f"unknown example tag(s) {sorted(unknown)}; known: {sorted(TAGS)}")
    return tags


def extract(path: Path, root: Path = REPO_ROOT) -> list[Example]:
    """The runnable blocks of one Markdown file."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Example] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        fence = opening["fence"]
        end = i + 1
        while end < len(lines) and not (
            lines[end].strip().startswith(fence) and lines[end].strip().strip(fence[0]) == ""
        ):
            end += 1
        language = LANGUAGES.get(opening["info"].lower())
        if language is not None:
            tags = parse_tags(lines[i - 1]) if i else frozenset()
            found.append(
                Example(
                    path=path.relative_to(root).as_posix(),
                    line=i + 1,
                    language=language,
                    code=_unindent(lines[i + 1 : end], opening["indent"]),
                    tags=tags,
                )
            )
        i = end + 1
    return found


def markdown_files(root: Path = REPO_ROOT) -> list[Path]:
    """README.md and docs/**/*.md, less the generated reference pages (docs/gen/)."""
    docs = root / "docs"
    pages = sorted(p for p in docs.rglob("*.md") if "gen" not in p.relative_to(docs).parts[:1])
    return [root / "README.md", *pages]


def collect(root: Path = REPO_ROOT) -> list[Example]:
    """Every runnable block of the documentation, in file and line order."""
    return [example for path in markdown_files(root) for example in extract(path, root)]


#: The ports the documentation shows, and the name of the port each stands for.
DOC_PORTS = {50051: "grpc", 50052: "grpc2", 8000: "gateway", 8001: "gateway2", 9090: "metrics"}


def rewrite_ports(code: str, ports: dict[str, int]) -> str:
    """``code`` with each documented port (:data:`DOC_PORTS`) replaced by the port of its name.

    Only whole numbers are replaced (``8000`` but not ``18000`` or ``80001``), and only those
    that follow a ``:`` (``localhost:8000``) or stand as a command-line value (``--port 8001``).
    """

    def replace(match: re.Match[str]) -> str:
        name = DOC_PORTS[int(match["port"])]
        return f"{match['before']}{ports[name]}" if name in ports else match[0]

    alternatives = "|".join(str(port) for port in DOC_PORTS)
    return re.sub(rf"(?P<before>[:=]|--port[ =]|port\W{{1,3}})(?P<port>{alternatives})(?!\d)", replace, code)
