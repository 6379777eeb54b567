"""mkdocs-gen-files script: the site's ``benchmarks/index.md`` and its result files.

The page is ``bench/README.md`` with each area's section re-rendered from the committed
``bench/results/<area>.json`` (``_bench_markdown.py`` beside this file);
``bench/results/*.json`` and ``*.png`` are copied to ``benchmarks/results/`` so the page's links
and plots resolve in the site.
"""

from __future__ import annotations

import sys
from pathlib import Path

import mkdocs_gen_files

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
# docs/gen/ is not a package: its renderers import each other as top-level modules.
sys.path[:0] = [p for p in (str(HERE), str(ROOT)) if p not in sys.path]
import _bench_markdown as bench_markdown  # noqa: E402

from bench.results import markdown  # noqa: E402

RESULTS = ROOT / "bench" / "results"

copied = sorted(p for p in RESULTS.iterdir() if p.is_file() and p.suffix in bench_markdown.COPIED_SUFFIXES)
for path in copied:
    with mkdocs_gen_files.open(f"benchmarks/results/{path.name}", "wb") as out:
        out.write(path.read_bytes())
page = bench_markdown.render_page(
    (ROOT / "bench" / "README.md").read_text(),
    bench_markdown.load_payloads(RESULTS),
    markdown,
    [p.name for p in copied],
)
with mkdocs_gen_files.open("benchmarks/index.md", "w") as out:
    out.write(page)
mkdocs_gen_files.set_edit_path("benchmarks/index.md", "gen/benchmarks.py")
