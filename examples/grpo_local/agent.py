"""The lookup agent (RL form): an ``AgentCoreRLApp`` that runs one episode of :mod:`.task` per rollout.

The trainer's ``_rollout`` block names the model (``base_url`` is the token gateway's session URL,
``model_id``, ``sampling_params``: ``temperature``, ``top_p``, ``max_tokens``); the payload carries the
``prompt`` and the ``secret``. Calls are plain OpenAI chat completions (not streamed: the gateway then stores each
response whole, ``weight_version`` included). Run it with ``python examples/grpo_local/agent.py``.
"""

from __future__ import annotations

from typing import Any

from openai import AsyncOpenAI

from agent_app import AgentCoreRLApp, openai_sampling_kwargs
from examples.grpo_local.task import LOOKUP_TOOL, MAX_MODEL_CALLS, LookupReward

app = AgentCoreRLApp()
reward_fn = LookupReward()


async def run_episode(
    client: AsyncOpenAI, model_id: str, payload: dict[str, Any], sampling: dict[str, Any]
) -> dict[str, Any]:
    """Talk to the model until it answers (or :data:`MAX_MODEL_CALLS` run out); return what happened."""
    messages: list[Any] = [{"role": "user", "content": payload["prompt"]}]
    tools: list[Any] = [LOOKUP_TOOL]
    called_tool = False
    answer = ""
    model_calls = 0
    while model_calls < MAX_MODEL_CALLS:
        model_calls += 1
        response = await client.chat.completions.create(model=model_id, messages=messages, tools=tools, **sampling)
        message = response.choices[0].message
        if not message.tool_calls:
            answer = message.content or ""
            break
        called_tool = True
        messages.append(
            {
                "role": "assistant",
                "content": message.content,
                "tool_calls": [call.model_dump(include={"id", "type", "function"}) for call in message.tool_calls],
            }
        )
        for call in message.tool_calls:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": payload["secret"]})
    return {"answer": answer, "called_tool": called_tool, "model_calls": model_calls}


@app.rollout_entrypoint
async def invoke(payload: dict[str, Any]) -> dict[str, Any]:
    """Run one lookup episode and score it."""
    rollout = payload["_rollout"]
    sampling = openai_sampling_kwargs(rollout.get("sampling_params"))
    async with AsyncOpenAI(base_url=rollout["base_url"], api_key=rollout.get("api_key") or "EMPTY") as client:
        episode = await run_episode(client, rollout["model_id"], payload, sampling)
    reward = reward_fn(response=episode["answer"], ground_truth=payload["secret"], called_tool=episode["called_tool"])
    return {"rewards": reward, **episode}


if __name__ == "__main__":
    app.run()
