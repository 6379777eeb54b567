"""gRPC servicers: convert the request, call one task (or the model manager), convert the result."""
