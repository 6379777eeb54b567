"""The server: its core (admission, data plane), faces (gRPC, in-process), servicers, models, CLI."""
