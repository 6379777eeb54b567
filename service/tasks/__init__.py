"""Transport-free orchestration of each RPC family: what both faces (gRPC, REST via gRPC) share.

A task takes plain dataclasses, acquires typed engine capabilities from the model manager,
runs the work (fan-out, merging, stores, executors) and returns dataclasses. Tasks know no
gRPC and no HTTP; ``service/server.py`` builds them with their collaborators.
"""
