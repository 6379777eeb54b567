"""The program that runs in a backend process: one loaded model, served over a Unix socket.

Started by the server's model manager as ``python -m service.backend --socket PATH --parent-pid PID
[--settings-json JSON]`` (:mod:`service.backend.__main__`), it serves
``universal_runtime.v1.BackendService`` (Load, Unload, Health, Stats; :mod:`service.backend.control`)
and the InferenceService RPCs of its one model (:mod:`service.backend.inference`) on ``unix:PATH``
only. It is one-shot: it loads once, serves, and exits on Unload, on SIGTERM, or when the server
that started it dies (:mod:`service.backend.process`); the server starts a fresh one after a failure.

Nothing is imported here, so that ``python -m service.backend`` reaches its process setup (the
parent-death signal) before any heavy import.
"""
