"""The server's faces over the core (:mod:`service.core`): adapters that make a call context and call it.

- :mod:`service.faces.grpc_server`: the gRPC server's handlers;
- :mod:`service.faces.in_process`: the channel of a gateway in the server's process;
- the batch runner's lines (:mod:`service.batches.runner`), through the same in-process channel.

A face converts only what its transport carries (metadata, bytes, deadlines, statuses); the
faces import the core, never each other.
"""
