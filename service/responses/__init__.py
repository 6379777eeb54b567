"""Server state of the OpenAI Responses API: stored responses and the conversations they continue.

* :mod:`service.responses.records`: one stored response, its checks and its bytes;
* :mod:`service.responses.store`: the store of them in the state store, with its bounds;
* :mod:`service.responses.turns`: the conversation a created response keeps, in the server's terms.

Blocking and transport-free: :mod:`service.tasks.response_store` runs it off the event loop.
"""

from service.responses.records import (
    PutResult,
    ResponseExistsError,
    ResponseLimits,
    ResponseNotFoundError,
    StoredResponse,
    validate_response_id,
)
from service.responses.store import MAX_DELETES_PER_PUT, ResponseStore
from service.responses.turns import Answer, Turn

__all__ = [
    "MAX_DELETES_PER_PUT",
    "Answer",
    "PutResult",
    "ResponseExistsError",
    "ResponseLimits",
    "ResponseNotFoundError",
    "ResponseStore",
    "StoredResponse",
    "Turn",
    "validate_response_id",
]
