"""The benchmarks page: ``bench/README.md`` with every area's section re-rendered from its JSON.

Used by ``docs/gen/benchmarks.py`` (the site's ``benchmarks/index.md``) and by
``tests/docs/test_generated_pages.py``; both import it with ``docs/gen/`` on the path (the folder is
not a package). The repository root must be importable (``bench.results`` renders the sections).

Two passes, so each can be checked on its own: :func:`render_sections` replaces the text between
``<!-- bench:<area>:begin -->`` and ``<!-- bench:<area>:end -->`` with
``bench.results.markdown(payload)`` of ``bench/results/<area>.json`` (what ``Report.finish``
would write, so the site always shows the committed results); :func:`site_links` then makes the
page's references resolve in the site (result files linked, other relative links made code spans).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# A marked section, as bench.results.update_readme writes it: the begin marker ends its line.
SECTION = re.compile(
    r"<!-- bench:(?P<area>[\w.-]+):begin -->\n(?P<body>.*?)<!-- bench:(?P=area):end -->", re.DOTALL
)
# Where the site copies bench/results/*.{json,png}, relative to the page (benchmarks/index.md).
RESULTS_DIR = "results"
COPIED_SUFFIXES = (".json", ".png")

_FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.DOTALL | re.MULTILINE)
_CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)")
# An inline link or image: [text](target) / ![alt](target "title"); text without nested brackets.
_LINK = re.compile(r"(?P<bang>!?)\[(?P<text>[^\]\n]*)\]\((?P<target>[^)\s]+)(?P<title>\s+\"[^\"]*\")?\)")


@dataclass
class Rendered:
    """What :func:`render_sections` did: the text, and which areas it re-rendered or kept."""

    text: str
    rerendered: list[str] = field(default_factory=list)  # from their JSON, by bench.results.markdown
    kept: list[str] = field(default_factory=list)  # non-standard JSON or no JSON: the README's text
    appended: list[str] = field(default_factory=list)  # a JSON without a section in the README


def load_payloads(results_dir: Path) -> dict[str, dict[str, Any]]:
    """Every ``<area>.json`` of ``results_dir`` by area (the file's stem), sorted by area.

    Raises:
        json.JSONDecodeError: A results file is not JSON (a broken commit: the build should say so).

    """
    return {path.stem: json.loads(path.read_text()) for path in sorted(Path(results_dir).glob("*.json"))}


def is_standard(payload: Mapping[str, Any]) -> bool:
    """Whether ``bench.results.markdown`` renders the payload: it has ``headline`` and ``scenarios``.

    Areas that write their own shape (eviction, quota_accuracy, soak before the harness took them)
    do not; their README section is kept as written.
    """
    return isinstance(payload, Mapping) and "headline" in payload and "scenarios" in payload


def render_sections(readme: str, payloads: Mapping[str, Mapping[str, Any]], markdown) -> Rendered:
    """Replace each marked section whose area has a standard payload with ``markdown(payload)``.

    Args:
        readme: ``bench/README.md``'s text.
        payloads: From :func:`load_payloads`.
        markdown: ``bench.results.markdown`` (passed in, so this module imports nothing of bench).

    Returns:
        The text (markers kept, so the sections stay findable) and what was done per area. A
        payload whose area has no section is appended at the end, as ``update_readme`` would; a
        non-standard one there gets a heading and a line naming its JSON, so every area shows.

    Raises:
        ValueError: ``markdown`` failed on a payload that looks standard (named in the message).

    """
    done = Rendered(text="")

    def replace(match: re.Match[str]) -> str:
        area = match.group("area")
        payload = payloads.get(area)
        if payload is None or not is_standard(payload):
            done.kept.append(area)
            return match.group(0)
        done.rerendered.append(area)
        return _block(area, _markdown(markdown, area, payload))

    text = SECTION.sub(replace, readme)
    for area, payload in payloads.items():
        if area in done.rerendered or area in done.kept:
            continue
        done.appended.append(area)
        if is_standard(payload):
            section = _markdown(markdown, area, payload)
        else:
            title = payload.get("title") if isinstance(payload, Mapping) else None
            section = f"### {title or area}\n\nJSON: `{RESULTS_DIR}/{area}.json`.\n"
        text = text.rstrip("\n") + f"\n\n{_block(area, section)}\n"
    done.text = text
    return done


def sections(text: str) -> dict[str, str]:
    """The body of every marked section of ``text`` by area (the inverse of the markers)."""
    return {m.group("area"): m.group("body") for m in SECTION.finditer(text)}


def site_links(text: str, available: Iterable[str], *, repo_prefix: str = "bench/") -> str:
    """Make the page's references resolve in the site, outside fenced code blocks.

    - A code span naming a result file the site carries (``results/<area>.png``, ``<area>.json``
      or ``bench/results/...``) becomes a link to ``results/<name>``, its text unchanged.
    - An inline link or image to a result file is pointed at ``results/<name>``.
    - Any other relative link (the README's neighbours in the repository: source files,
      ``../README.md``) becomes its text followed by the repository path as a code span, since the
      site does not carry it; absolute URLs and in-page anchors are kept.

    Args:
        text: Markdown (from :func:`render_sections`).
        available: Names of the files copied under ``results/`` (``generation.png``, ...).
        repo_prefix: The README's folder in the repository, to name a relative link's target.

    """
    names = set(available)
    return _outside_fences(text, lambda prose: _prose_links(prose, names, repo_prefix))


def site_lists(text: str) -> str:
    """Start the lists that follow a paragraph line directly, as Python-Markdown needs.

    GitHub renders ``text:`` followed by ``  - item`` lines as a list; Python-Markdown (MkDocs)
    runs them into the paragraph unless a blank line precedes the list. The unstable-cell lines
    of ``bench.results.markdown`` are written that way, so the page gets the blank line, and the
    items (indented 1 to 3 spaces) are moved to the margin. Fenced code is left alone.
    """
    return _outside_fences(text, _prose_lists)


def plot_line(area: str, payload: Mapping[str, Any], available: Iterable[str]) -> str | None:
    """An image line showing the area's plot, when the site carries ``<area>.png``; else None."""
    if f"{area}.png" not in set(available):
        return None
    title = payload.get("title", area) if isinstance(payload, Mapping) else area
    alt = re.sub(r"[\[\]]", "", str(title))
    return f"![{alt}]({RESULTS_DIR}/{area}.png)"


def render_page(
    readme: str, payloads: Mapping[str, Mapping[str, Any]], markdown, available: Iterable[str]
) -> str:
    """The whole page: sections re-rendered, a note on where it comes from, plots, links made to resolve.

    Args:
        readme: ``bench/README.md``'s text.
        payloads: From :func:`load_payloads`.
        markdown: ``bench.results.markdown``.
        available: Names of the files the site carries under ``benchmarks/results/``.

    """
    names = set(available)
    rendered = render_sections(readme, payloads, markdown)
    text = rendered.text

    def with_plot(match: re.Match[str]) -> str:
        area = match.group("area")
        extra = []
        if f"{area}.json" in names and f"{area}.json" not in match.group("body"):
            # A section its area wrote itself may not name its JSON: the site links it anyway.
            extra.append(f"JSON: `{RESULTS_DIR}/{area}.json`.")
        if line := plot_line(area, payloads.get(area, {}), names):
            extra.append(line)
        return "\n\n".join([match.group(0), *extra])

    text = SECTION.sub(with_plot, text)
    note = (
        '!!! note "Generated from `bench/README.md` and `bench/results/`"\n'
        "    Each area's section below is rendered from its committed `bench/results/<area>.json` "
        "when the site is built; the JSON and plot files are linked from each section."
    )
    text = _after_title(text, note)
    return site_lists(site_links(text, names)).rstrip("\n") + "\n"


# --- helpers ------------------------------------------------------------------------------------


_ITEM = re.compile(r"^ {0,3}[-*+] ")
_OPENS_BLOCK = re.compile(r"^(?:[-*+] |\d+[.)] |#|\||>|<|!!!)")


def _outside_fences(text: str, transform) -> str:
    out, last = [], 0
    for fence in _FENCE.finditer(text):
        out.append(transform(text[last : fence.start()]))
        out.append(fence.group(0))
        last = fence.end()
    out.append(transform(text[last:]))
    return "".join(out)


def _prose_lists(text: str) -> str:
    lines = text.split("\n")
    out: list[str] = []
    in_run = False  # inside a list this pass started: its items move to the margin too
    for line in lines:
        previous = out[-1] if out else ""
        if _ITEM.match(line):
            starts = previous.strip() and not previous.startswith(" ") and not _OPENS_BLOCK.match(previous)
            if starts and not in_run:
                out.append("")
                in_run = True
            out.append(line.lstrip() if in_run else line)
        else:
            in_run = False
            out.append(line)
    return "\n".join(out)


def _markdown(markdown, area: str, payload: Mapping[str, Any]) -> str:
    try:
        return markdown(dict(payload))
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"bench.results.markdown failed on bench/results/{area}.json: {exc!r}") from exc


def _block(area: str, section: str) -> str:
    return f"<!-- bench:{area}:begin -->\n{section}<!-- bench:{area}:end -->"


def _after_title(text: str, block: str) -> str:
    """Insert ``block`` after the first H1 line (at the top when there is none)."""
    match = re.search(r"^# .*$", text, re.MULTILINE)
    if not match:
        return f"{block}\n\n{text}"
    return f"{text[: match.end()]}\n\n{block}\n{text[match.end() :]}"


def _result_name(reference: str, names: set[str]) -> str | None:
    """The copied file a reference names (``results/x.png``, ``bench/results/x.png``, ``x.png``)."""
    path = reference.split("#", 1)[0].split("?", 1)[0]
    for prefix in ("./", "bench/", f"{RESULTS_DIR}/"):
        path = path.removeprefix(prefix)
    return path if path in names else None


def _prose_links(text: str, names: set[str], repo_prefix: str) -> str:
    def link(match: re.Match[str]) -> str:
        target = match.group("target")
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE) or target.startswith("#"):
            return match.group(0)  # absolute URL or in-page anchor
        name = _result_name(target, names)
        if name is not None:
            title = match.group("title") or ""
            return f"{match.group('bang')}[{match.group('text')}]({RESULTS_DIR}/{name}{title})"
        path = _repo_path(repo_prefix, target)
        shown = match.group("text").strip()
        return f"{shown} (`{path}`)" if shown and shown.strip("`") != path else f"`{path}`"

    text = _LINK.sub(link, text)
    out, last = [], 0
    for span in _CODE_SPAN.finditer(text):
        out.append(text[last : span.start()])
        name = _result_name(span.group(2).strip(), names)
        linked = text[span.start() - 1 : span.start()] == "[" and text[span.end() : span.end() + 2] == "]("
        if name is not None and not linked:
            out.append(f"[{span.group(0)}]({RESULTS_DIR}/{name})")
        else:
            out.append(span.group(0))
        last = span.end()
    out.append(text[last:])
    return "".join(out)


def _repo_path(repo_prefix: str, target: str) -> str:
    """``target`` relative to the README's folder, as a path from the repository root."""
    parts: list[str] = [p for p in repo_prefix.split("/") if p]
    for part in target.split("#", 1)[0].split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts:
                parts.pop()
        else:
            parts.append(part)
    anchor = f"#{target.split('#', 1)[1]}" if "#" in target else ""
    return "/".join(parts) + anchor
