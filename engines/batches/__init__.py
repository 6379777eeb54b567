"""The OpenAI Batch API's state: input files validated line by line, batches, their results.

:mod:`engines.batches.lines` checks an uploaded JSONL file and writes the output lines;
:mod:`engines.batches.store` keeps files, batch records, per-line results and run leases in the
state store (:mod:`engines.state_store`). Running the lines is the service's
(:mod:`service.batches.runner`): executing a line calls the gateway's routes, which engines
cannot see.
"""
