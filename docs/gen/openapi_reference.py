"""mkdocs-gen-files script: the site's ``reference/openapi.md`` and ``reference/openapi.json``.

The schema is the gateway's own (``gateway.app.create_app(...).openapi()``, built without a
server or a connection); ``_openapi_markdown.py`` beside this file  renders it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import mkdocs_gen_files

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
# docs/gen/ is not a package: its renderers import each other as top-level modules.
sys.path[:0] = [p for p in (str(HERE), str(ROOT)) if p not in sys.path]
import _openapi_markdown as openapi_markdown  # noqa: E402

schema = openapi_markdown.gateway_openapi()
with mkdocs_gen_files.open("reference/openapi.json", "w") as out:
    out.write(json.dumps(schema, indent=2) + "\n")
with mkdocs_gen_files.open("reference/openapi.md", "w") as out:
    out.write(openapi_markdown.render_markdown(schema, json_name="openapi.json"))
mkdocs_gen_files.set_edit_path("reference/openapi.md", "gen/openapi_reference.py")
