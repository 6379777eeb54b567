"""The official OpenAI Node SDK's Responses API (examples/node/responses.mjs) → gateway → real server.

A streamed response (typed events in order, with sequence numbers), the stored response fetched
back, a forced function call answered over ``previous_response_id``, and a 404.
"""

from __future__ import annotations

import json

from tests.clients.test_node_client import CLIENT_TIMEOUT_S, NODE_DIR, node, run  # noqa: F401 (node: fixture)


async def test_node_openai_sdk_streams_responses(node, gateway_url):  # noqa: F811
    rc, out, err = await run(
        node, "responses.mjs", f"{gateway_url}/v1", cwd=NODE_DIR, limit_s=CLIENT_TIMEOUT_S
    )
    assert rc == 0, f"responses.mjs exited {rc}\nstdout:\n{out}\nstderr:\n{err}"
    values: dict[str, list[str]] = {}
    for line in out.splitlines():
        keyword, _, value = line.partition(" ")
        values.setdefault(keyword, []).append(value)

    events = [value.split(" ") for value in values["EVENT"]]
    kinds = [kind for kind, _ in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-1] == "response.completed"
    assert [int(number) for _, number in events] == list(range(len(events)))
    deltas = [json.loads(value) for value in values["DELTA"]]
    assert len(deltas) >= 3, out
    text = json.loads(values["TEXT"][0])
    assert "".join(deltas) == text and text.strip()
    assert values["STATUS"] == ["completed"]
    usage = json.loads(values["USAGE"][0])
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert json.loads(values["STORED"][0]) == text

    name, _, arguments = values["CALL"][0].partition(" ")
    assert name == "get_weather" and isinstance(json.loads(arguments)["city"], str)
    assert values["ANSWER_ITEMS"] == ["message"]
    assert values["ERROR"] == ["404 previous_response_not_found"]
