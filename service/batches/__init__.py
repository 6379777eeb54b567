"""The Batch API's service side: the calls of BatchService off the event loop, and the runner of batches."""
