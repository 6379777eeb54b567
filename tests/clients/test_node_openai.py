"""The official OpenAI Node SDK (examples/node/openai.mjs) → gateway: streamed chat, embeddings, an error."""

from __future__ import annotations

import json

from tests.clients.test_node_client import CLIENT_TIMEOUT_S, NODE_DIR, node, run  # noqa: F401 (node: fixture)


async def test_node_openai_sdk_streams_chat_and_embeds(node, gateway_url):  # noqa: F811
    rc, out, err = await run(node, "openai.mjs", f"{gateway_url}/v1", cwd=NODE_DIR, limit_s=CLIENT_TIMEOUT_S)
    assert rc == 0, f"openai.mjs exited {rc}\nstdout:\n{out}\nstderr:\n{err}"
    values: dict[str, list[str]] = {}
    for line in out.splitlines():
        keyword, _, value = line.partition(" ")
        values.setdefault(keyword, []).append(value)

    tokens = [json.loads(value) for value in values["TOKEN"]]
    assert len(tokens) >= 3, out
    assert "".join(tokens).strip()
    assert values["FINISH"] in (["stop"], ["length"])
    usage = json.loads(values["USAGE"][0])
    assert usage["completion_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]

    assert values["DIMENSIONS"] == ["384"]
    assert float(values["COSINE_PARAPHRASE"][0]) > float(values["COSINE_UNRELATED"][0]) + 0.2
    assert values["ERROR"] == ["404 model_not_found"]
