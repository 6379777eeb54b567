"""The documentation site: README.md is a short front page, every page under docs/ is in
mkdocs.yml's nav (and every nav entry is a page), and ``mkdocs build --strict`` succeeds, so no
link, anchor or nav entry is broken (``make docs`` builds the same site into site/)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
README = REPO / "README.md"
CONFIG = REPO / "mkdocs.yml"
# Pages docs/gen/*.py write at build time (mkdocs-gen-files): in the nav, never on disk.
GENERATED = re.compile(r"^(reference/.*|benchmarks/index)\.md$")
FRONT_PAGE_MAX_LINES = 300


def nav_pages(nav: list) -> list[str]:
    """Every page path of a mkdocs nav, in order (sections walked, external links left out)."""
    pages: list[str] = []
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        if isinstance(value, list):
            pages += nav_pages(value)
        elif not re.match(r"^[a-z]+://", value):
            pages.append(value)
    return pages


def source_pages() -> set[str]:
    """The Markdown pages under docs/, relative to it (the generator scripts' folder left out)."""
    return {
        path.relative_to(DOCS).as_posix()
        for path in DOCS.rglob("*.md")
        if path.relative_to(DOCS).parts[0] != "gen"
    }


def config() -> dict:
    return yaml.safe_load(CONFIG.read_text(encoding="utf-8"))


def test_the_readme_is_a_front_page_that_starts_with_the_two_commands():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= FRONT_PAGE_MAX_LINES, (
        f"README.md has {len(lines)} lines; the pages under docs/ hold the rest"
    )
    assert lines[0] == "# Universal Runtime"
    first_block = lines[lines.index("```bash") + 1 :][:2]
    assert [line.split()[:2] for line in first_block] == [["make", "serve"], ["make", "test"]]
    before = lines[1 : lines.index("```bash")]
    # Only blank lines and the docs examples' tag (tests/docs/examples.py) come before the commands.
    assert all(not line.strip() or line.startswith("<!-- example:") for line in before), (
        "the commands come first"
    )


def test_the_readme_links_name_files_that_exist():
    text = README.read_text(encoding="utf-8")
    targets = [link.split("#")[0] for link in re.findall(r"\]\(([^)\s]+)\)", text)]
    local = [target for target in targets if target and not re.match(r"^[a-z]+:", target)]
    assert local, "the front page links into docs/"
    missing = [target for target in local if not (REPO / target).exists()]
    assert not missing, f"README.md links to missing files: {missing}"


def test_every_page_is_in_the_nav_and_every_nav_entry_is_a_page():
    in_nav = nav_pages(config()["nav"])
    on_disk = source_pages()
    assert len(in_nav) == len(set(in_nav)), "a page is in the nav twice"
    left_out = sorted(on_disk - set(in_nav))
    assert not left_out, f"pages missing from mkdocs.yml's nav: {left_out}"
    dangling = sorted(page for page in set(in_nav) - on_disk if not GENERATED.match(page))
    assert not dangling, f"nav entries without a page under docs/: {dangling}"


@pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None,
    reason="mkdocs and mkdocs-material are not installed (the docs extra; make install installs it)",
)
def test_the_site_builds_strict(tmp_path):
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "DISABLE_MKDOCS_2_WARNING": "true"}
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(CONFIG)]
    built = subprocess.run(
        [*command, "--site-dir", str(tmp_path / "site")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, f"mkdocs build --strict failed:\n{built.stderr[-6000:]}"
    assert (tmp_path / "site" / "index.html").is_file()
    missing = [
        page for page in nav_pages(config()["nav"]) if not (tmp_path / "site" / built_path(page)).is_file()
    ]
    assert not missing, f"nav pages the build did not write: {missing}"


def built_path(page: str) -> str:
    """Where mkdocs writes a page with directory URLs: ``cli.md`` → ``cli/index.html``."""
    stem = page.removesuffix(".md")
    return f"{stem}.html" if stem == "index" or stem.endswith("/index") else f"{stem}/index.html"
