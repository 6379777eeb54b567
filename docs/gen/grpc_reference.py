"""mkdocs-gen-files script: the site's ``reference/grpc.md``, rendered from the protos' comments.

The rendering lives in ``_proto_markdown.py`` beside this file, so the tests can call it without MkDocs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import mkdocs_gen_files

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
# docs/gen/ is not a package: its renderers import each other as top-level modules.
sys.path[:0] = [p for p in (str(HERE), str(ROOT)) if p not in sys.path]
import _proto_markdown as proto_markdown  # noqa: E402

descriptors = proto_markdown.compile_descriptor_set(ROOT / "protos")
with mkdocs_gen_files.open("reference/grpc.md", "w") as page:
    page.write(proto_markdown.render_markdown(descriptors))
mkdocs_gen_files.set_edit_path("reference/grpc.md", "gen/grpc_reference.py")
