"""Operator subcommands of ``universal-runtime``: ``ps``, ``ls``, ``load``, ``unload``, ``health``, ``pull``.

Each talks gRPC to a running server, except ``pull``, which writes a catalog file; one module per
concern: :mod:`.main` (flags and dispatch), :mod:`.connection` (channel, TLS, API key, errors),
:mod:`.output` (tables and JSON), :mod:`.models` and :mod:`.health` (the RPC commands), and the
``pull`` pipeline in :mod:`.pull`, :mod:`.hub`, :mod:`.detect`, :mod:`.verify` and :mod:`.user_catalog`.
"""
