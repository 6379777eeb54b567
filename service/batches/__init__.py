"""The OpenAI Batch API's server side: its state, the calls of BatchService, and the runner of batch jobs.

:mod:`~service.batches.lines` checks an uploaded JSONL file and writes the output lines;
:mod:`~service.batches.store` keeps files, batch job records, per-line results and run leases in
the state store (:mod:`engines.state_store`), one module a concern; :mod:`~service.batches.api`
runs BatchService's calls off the event loop; :mod:`~service.batches.runner` runs the jobs'
lines through the gateway's routes. "Batch" in this package is OpenAI's Batch API (a job of many
request lines), never the engines' dynamic batching of requests.
"""
