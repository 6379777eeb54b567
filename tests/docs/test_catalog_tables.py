"""The per-backend option tables of docs/models/catalog.md equal the ones generated from the options models."""

from __future__ import annotations

import pytest

from engines.registry import registered_backends
from tests.docs.catalog_tables import (
    BEGIN,
    END,
    PAGE,
    backend_table,
    nested_model,
    page_region,
    render,
    rewrite,
)


def test_the_page_tables_are_the_generated_ones():
    region = page_region(PAGE.read_text())
    assert region is not None, f"{PAGE.name} lacks the {BEGIN} ... {END} region"
    assert region == render(), (
        f"{PAGE.name}'s catalog option tables differ from the models: run 'python -m tests.docs.catalog_tables'"
    )


@pytest.mark.parametrize("backend", sorted(registered_backends()))
def test_every_backend_has_a_table_with_a_row_per_option(backend):
    cls = registered_backends()[backend]
    table = backend_table(backend, cls)
    rows = [line.split("|")[1].strip(" `") for line in table.splitlines() if line.startswith("| `")]
    expected = []
    for name, field in cls.options_model.model_fields.items():
        expected.append(name)
        block = nested_model(field)  # a block of options (reasoning): a dotted row per key follows
        expected += [f"{name}.{key}" for key in block.model_fields] if block is not None else []
    assert rows == expected


def test_a_row_says_type_default_range_and_what():
    table = backend_table("llama_cpp", registered_backends()["llama_cpp"])
    row = next(line for line in table.splitlines() if line.startswith("| `max_sequences` |"))
    cells = [cell.strip() for cell in row.split("|")[1:-1]]
    assert cells[:4] == ["`max_sequences`", "integer", "`8`", "≥ 1"]
    assert cells[4]  # the description
    enum = next(line for line in table.splitlines() if line.startswith("| `quantize` |"))
    assert "string or unset | unset | `q4_0`, `q8_0`, `f16` |" in enum


def test_rewriting_fills_the_region_and_the_schema_file(tmp_path):
    page = tmp_path / "catalog.md"
    page.write_text(f"before\n{BEGIN}\nstale\n{END}\nafter\n")
    schema = tmp_path / "catalog.schema.json"
    rewrite(page, schema)
    text = page.read_text()
    assert page_region(text) == render()
    assert text.startswith("before\n") and text.endswith(f"{END}\nafter\n")
    assert schema.read_text().startswith('{\n  "$schema"')
    page.write_text("no markers\n")
    with pytest.raises(ValueError, match="expected one"):
        rewrite(page, schema)
