"""The gateway passes each HTTP client's address to the server (``x-ur-client-address``), bounded.

Without API keys the server shares its PDF renderer by that address (tests/service/ocr/test_pdf_fairness_by_address.py).
"""

from __future__ import annotations

import contextlib

import httpx

from gateway.app import create_app
from service.shared.client_address import CLIENT_ADDRESS_METADATA_KEY, MAX_CLIENT_ADDRESS_CHARS
from tests.gateway.gateway_fakes import FakeServer


@contextlib.asynccontextmanager
async def client_at(fake: FakeServer, address: str):
    app = create_app(fake.target)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app, client=(address, 5000)), base_url="http://gateway"
        ) as client,
    ):
        yield client


async def test_the_clients_address_goes_with_every_call(fake: FakeServer) -> None:
    async with client_at(fake, "203.0.113.7") as client:
        assert (await client.get("/v1/models")).status_code == 200
    assert fake.models.received[0].metadata[CLIENT_ADDRESS_METADATA_KEY] == "203.0.113.7"


async def test_an_address_is_cut_to_printable_ascii_within_the_bound(fake: FakeServer) -> None:
    # An address from a proxy's X-Forwarded-For is whatever the proxy wrote.
    async with client_at(fake, "é\x01" + "a" * 500) as client:
        assert (await client.get("/v1/models")).status_code == 200
    assert fake.models.received[0].metadata[CLIENT_ADDRESS_METADATA_KEY] == "a" * (
        MAX_CLIENT_ADDRESS_CHARS - 2
    )
