"""Stand-in of ``rllm.gateway.tinker_adapter``: ``create_tinker_handler(engine)``, an ``async (dict) -> dict``.

Rewritten from rLLM 9beb6e0f: an OpenAI chat request's ``tools``, ``temperature``, ``top_p``, ``top_k``,
``max_tokens`` and ``max_completion_tokens`` go to ``engine.get_model_response``; the answer carries vLLM's token
fields (``prompt_token_ids``, the choice's ``token_ids`` and ``logprobs.content``), tool calls as ``call_<i>`` with
JSON arguments (``finish_reason`` ``tool_calls`` where the engine said ``stop``), and ``weight_version``.
"""

import json
import time
import uuid


def _to_openai_tool_calls(tool_calls):
    return [
        {
            "id": f"call_{index}",
            "type": "function",
            "function": {
                "name": call.name,
                "arguments": json.dumps(call.arguments) if isinstance(call.arguments, dict) else str(call.arguments),
            },
        }
        for index, call in enumerate(tool_calls)
    ]


def create_tinker_handler(engine):
    async def handler(request_body):
        kwargs = {}
        if request_body.get("tools"):
            kwargs["tools"] = request_body["tools"]
        for key in ("temperature", "top_p", "top_k", "max_tokens", "max_completion_tokens"):
            if request_body.get(key) is not None:
                kwargs[key] = request_body[key]
        output = await engine.get_model_response(request_body.get("messages", []), **kwargs)
        finish_reason = output.finish_reason or "stop"
        message = {"role": "assistant", "content": output.content or output.text or ""}
        if output.reasoning:
            message["reasoning"] = output.reasoning
        if output.tool_calls:
            message["tool_calls"] = _to_openai_tool_calls(output.tool_calls)
            if finish_reason == "stop":
                finish_reason = "tool_calls"
        prompt_ids, completion_ids = list(output.prompt_ids or []), list(output.completion_ids or [])
        prompt_len = output.prompt_length or len(prompt_ids)
        completion_len = output.completion_length or len(completion_ids)
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request_body.get("model", getattr(engine, "model_name", "default")),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": finish_reason,
                    "token_ids": completion_ids,
                    "logprobs": {"content": [{"logprob": logprob} for logprob in output.logprobs or []]},
                }
            ],
            "usage": {
                "prompt_tokens": prompt_len,
                "completion_tokens": completion_len,
                "total_tokens": prompt_len + completion_len,
            },
            "prompt_token_ids": prompt_ids,
            "weight_version": getattr(output, "weight_version", None),
        }

    return handler
