"""InferenceService encoder RPCs: Embed, Classify, ExtractEntities, Rerank."""

from __future__ import annotations

import grpc

from engines.errors import NotImplementedYetError
from engines.types import Task
from service.convert.embedding import embed_response, embedding_request
from service.request_context import note_model
from service.servicers.base import RpcBase


class EncoderRpcs(RpcBase):
    """Encoder-model RPCs."""

    async def Embed(self, request, context: grpc.aio.ServicerContext):
        """Embed texts; vectors come back in input order."""
        job = embedding_request(request, max_inputs=self._settings.max_batch_inputs)
        note_model(request.model)
        async with self._manager.acquire(request.model, Task.EMBED, request.keep_alive or None) as engine:
            result = await engine.executor.run(engine.embed, job)
        return embed_response(request.model, result)

    async def Classify(self, request, context):
        """Not built yet: UNIMPLEMENTED."""
        raise NotImplementedYetError("Classify is not implemented yet in this server build")

    async def ExtractEntities(self, request, context):
        """Not built yet: UNIMPLEMENTED."""
        raise NotImplementedYetError("ExtractEntities is not implemented yet in this server build")

    async def Rerank(self, request, context):
        """Not built yet: UNIMPLEMENTED."""
        raise NotImplementedYetError("Rerank is not implemented yet in this server build")
