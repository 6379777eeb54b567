"""An S3 server for tests: moto's, in this process on 127.0.0.1 and a free port."""

from __future__ import annotations

import functools
import logging
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

KEY, SECRET, REGION = "testing", "testing", "us-east-1"


def _atomic_puts() -> None:
    """Make moto's conditional PUTs atomic, as S3's are.

    moto checks If-None-Match / If-Match and then stores the object in two steps, on whichever
    request thread; S3 does both as one. Without this, two replicas racing in a test could both
    "win" a conditional write, which real S3 never lets happen.
    """
    from moto.s3.responses import S3Response

    if getattr(S3Response.put_object, "_atomic", False):
        return
    lock = threading.Lock()
    original = S3Response.put_object

    @functools.wraps(original)
    def put_object(self: Any, *args: Any, **kwargs: Any) -> Any:
        with lock:
            return original(self, *args, **kwargs)

    put_object._atomic = True  # type: ignore[attr-defined]
    S3Response.put_object = put_object  # type: ignore[method-assign]


@contextmanager
def moto_s3(bucket: str = "state") -> Iterator[tuple[Any, dict[str, Any]]]:
    """Start moto's S3 server with ``bucket`` created; yields the server and fsspec storage options."""
    import boto3
    from moto.server import ThreadedMotoServer

    _atomic_puts()
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id=KEY, aws_secret_access_key=SECRET, region_name=REGION
    ).create_bucket(Bucket=bucket)
    options = {
        "endpoint_url": endpoint,
        "key": KEY,
        "secret": SECRET,
        "client_kwargs": {"region_name": REGION},
    }
    try:
        yield server, options
    finally:
        server.stop()


#: The secret of :func:`refused_s3_options`: no error a client sees may contain it.
REFUSED_SECRET = "s3cr3t"


@contextmanager
def refused_s3_options() -> Iterator[dict[str, str]]:
    """fsspec storage options of an S3 endpoint that refuses every connection (a port bound on
    127.0.0.1 and never listened on, for the ``with`` block), with :data:`REFUSED_SECRET`."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        yield {
            "endpoint_url": f"http://127.0.0.1:{closed.getsockname()[1]}",
            "key": "k",
            "secret": REFUSED_SECRET,
        }
