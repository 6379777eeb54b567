"""The grpc.aio server: servicers, interceptors, model manager, settings and CLI."""
