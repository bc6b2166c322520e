"""A multi-turn ``agent_app`` agent for the verl and slime end-to-end tests.

It chats ``turns`` times with the model at ``_rollout.base_url`` (the trainer's gateway session),
splicing an environment message between turns, then follows its script: ``action`` ``raise`` ends it as
``agent_error`` (after the calls, so traces exist), ``sleep_s`` delays the end (past a short deadline:
``timed_out``), else it returns ``reward``. The script is ``payload["extra_info"]`` (verl's dataset row)
or ``payload["metadata"]`` (slime's sample); the prompt is chat messages (verl) or text (slime).
"""

import asyncio

import httpx

from agent_app import AgentCoreRLApp

app = AgentCoreRLApp()


@app.rollout_entrypoint
async def invoke(payload):
    """Chat, splice observations, then do what the script says."""
    rollout = payload["_rollout"]
    script = payload.get("extra_info") or payload.get("metadata") or {}
    prompt = payload["prompt"]
    messages = list(prompt) if isinstance(prompt, list) else [{"role": "user", "content": str(prompt)}]
    answer = ""
    headers = {"Authorization": f"Bearer {rollout.get('api_key') or 'none'}"}  # the experiment's model-call key
    async with httpx.AsyncClient(timeout=30, headers=headers) as http:
        for turn in range(int(script.get("turns", 2))):
            body = {
                **rollout.get("sampling_params", {}),
                "model": rollout.get("model_id", "policy"),
                "messages": messages,
            }
            response = await http.post(f"{rollout['base_url']}/chat/completions", json=body)
            response.raise_for_status()
            answer = response.json()["choices"][0]["message"]["content"]
            messages = [
                *messages,
                {"role": "assistant", "content": answer},
                {"role": "user", "content": f"tick {turn}"},
            ]
    await asyncio.sleep(float(script.get("sleep_s", 0)))
    if script.get("action") == "raise":
        raise RuntimeError("scripted failure")
    return {"rewards": float(script.get("reward", 1.0)), "response": answer}


if __name__ == "__main__":
    app.run()
