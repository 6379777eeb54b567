"""gRPC servicers: validation and translation only; work happens in the model manager and engines."""
