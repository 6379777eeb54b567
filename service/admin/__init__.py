"""Operator subcommands of ``universal-runtime``: every command but ``serve``.

``ps``, ``ls``, ``load``, ``unload`` and ``health`` talk gRPC to a running server; ``pull`` writes a
catalog file; ``prepare`` builds the catalog's converted model copies in this process. One module
per concern: :mod:`.main` (flags and dispatch), :mod:`.connection` (channel, TLS, API key, errors),
:mod:`.output` (tables and JSON), :mod:`.models` and :mod:`.health` (the RPC commands), the
``pull`` pipeline in :mod:`.pull`, :mod:`.hub`, :mod:`.detect`, :mod:`.verify` and :mod:`.user_catalog`,
and :mod:`.prepare`.
"""
