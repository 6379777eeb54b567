"""The runtime's transport-independent core: the :class:`~service.core.data_plane.DataPlane`.

Every operation of the contract is a method of the data plane taking its request message and an
explicit :class:`~service.core.context.CallContext`; admission (request id and log line,
tracing, concurrency, API key, priority, quotas, error mapping) is an ordered chain around it
(:mod:`service.core.chain`). The faces are adapters: the gRPC server (:mod:`service.faces.grpc_server`),
the gateway beside the server (:mod:`service.faces.in_process`) and the batch runner. Nothing here
imports a transport (gRPC, HTTP).
"""
