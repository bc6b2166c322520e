"""Stand-in of ``rllm.engine.rollout.tinker_engine``: ``TinkerEngine`` on tinker-cookbook's renderers.

Rewritten from rLLM 9beb6e0f: the renderer is ``renderers.get_renderer(renderer_name, tokenizer)``, the name
``model_info.get_recommended_renderer_name(model_name)`` when none is given (``ValueError`` for a model the cookbook
does not know, saying to set ``rollout_engine.renderer_name``); stop sequences are the renderer's; a chat becomes
the renderer's generation prompt (tools first injected with ``create_conversation_prefix_with_tools``, the system
message's text as its system prompt), sampled once by the current sampling client with the mode's sampling
parameters (their ``max_tokens`` dropped: the request's, else ``max_response_length``, cut to
``max_model_length - 1 - prompt``), and the response parsed by the renderer into content, reasoning and tool calls.
Left out: ``bypass_render_with_parser=True`` (rLLM's ``ChatTemplateParser``; refused here), images.
"""

import json

import tinker
from tinker.types import ModelInput
from tinker_cookbook import model_info, renderers

from rllm.engine.rollout.rollout_engine import ModelOutput, RolloutEngine
from rllm.tools.tool_base import ToolCall
from rllm.workflows.workflow import TerminationReason


class TerminationEvent(Exception):
    def __init__(self, reason):
        super().__init__(reason)
        self.reason = reason


def _flat_token_input_to_model_input(token_input):
    chunks, text = [], []
    for elem in token_input:
        if isinstance(elem, int):
            text.append(elem)
            continue
        if text:
            chunks.append(tinker.EncodedTextChunk(tokens=list(text)))
            text.clear()
        chunks.append(elem)
    if text:
        chunks.append(tinker.EncodedTextChunk(tokens=list(text)))
    return ModelInput(chunks=chunks)


def _flat_token_input_length(token_input):
    return sum(1 if isinstance(elem, int) else elem.length for elem in token_input)


def _convert_openai_messages(messages):
    from tinker_cookbook.renderers.base import ToolCall as CookbookToolCall

    out = []
    for msg in messages:
        converted = {"role": msg["role"], "content": msg.get("content") or ""}
        for key in ("name", "tool_call_id"):
            if key in msg:
                converted[key] = msg[key]
        if "tool_calls" in msg:
            converted["tool_calls"] = [CookbookToolCall.model_validate(call) for call in msg["tool_calls"]]
        out.append(converted)
    return out


def _prepare_messages_with_tools(renderer, messages, tools):
    specs = [
        {
            "name": tool["function"]["name"],
            "description": tool["function"].get("description", ""),
            "parameters": tool["function"].get("parameters", {}),
        }
        for tool in tools
        if tool.get("type") == "function"
    ]
    system_prompt, remaining = "", list(messages)
    if messages and messages[0]["role"] == "system":
        content = messages[0].get("content") or ""
        system_prompt = content if isinstance(content, str) else ""
        remaining = list(messages[1:])
    return renderer.create_conversation_prefix_with_tools(specs, system_prompt) + remaining


def _parse_tinker_message(message):
    content = message["content"]
    reasoning = ""
    if isinstance(content, list):
        reasoning = "\n".join(part["thinking"] for part in content if part["type"] == "thinking")
        content = "\n".join(part["text"] for part in content if part["type"] == "text")
    tool_calls = []
    for call in message.get("tool_calls", []):
        arguments = call.function.arguments
        tool_calls.append(
            ToolCall(
                name=call.function.name, arguments=json.loads(arguments) if isinstance(arguments, str) else arguments
            )
        )
    return content, reasoning, tool_calls


class TinkerEngine(RolloutEngine):
    def __init__(
        self,
        base_url,
        model_name,
        tokenizer,
        service_client,
        max_prompt_length=4096,
        max_response_length=4096,
        max_model_length=32768,
        sampling_params=None,
        bypass_render_with_parser=True,
        processor=None,
        image_processor=None,
        disable_thinking=False,
        accumulate_reasoning=False,
        reasoning_effort="medium",
        renderer_name=None,
        **kwargs,
    ):
        super().__init__()
        if bypass_render_with_parser:
            raise NotImplementedError(
                "the stand-in renders with tinker-cookbook only: set rollout_engine.bypass_render_with_parser=false"
            )
        self.base_url = base_url
        self.model_name = model_name
        self.tokenizer = tokenizer
        self.service_client = service_client
        self.max_prompt_length = max_prompt_length
        self.max_response_length = max_response_length
        self.max_model_length = max_model_length - 1
        self.train_sampling_params = dict(sampling_params.get("train", {})) if sampling_params else {}
        self.val_sampling_params = dict(sampling_params.get("val", {})) if sampling_params else {}
        if renderer_name is None:
            try:
                renderer_name = model_info.get_recommended_renderer_name(self.model_name)
            except KeyError as e:
                raise ValueError(
                    f"tinker_cookbook's model_info does not know '{self.model_name}'. Set "
                    "rollout_engine.renderer_name explicitly to a renderer matching the model's chat template."
                ) from e
        self.renderer = renderers.get_renderer(renderer_name, self.tokenizer, image_processor=image_processor)
        self.stop_sequences = self.renderer.get_stop_sequences()
        self.sampling_client = None

    def set_sampling_client(self, sampling_client):
        self.sampling_client = sampling_client

    async def get_token_output_from_token_input(self, token_input, **kwargs):
        if self.sampling_client is None:
            raise RuntimeError("Sampling client not set. Call set_sampling_client() first.")
        input_length = _flat_token_input_length(token_input)
        if kwargs.pop("enforce_max_prompt_length", True) and input_length > min(
            self.max_prompt_length, self.max_model_length
        ):
            raise TerminationEvent(TerminationReason.MAX_PROMPT_LENGTH_EXCEEDED)
        params = (self.val_sampling_params if self.is_validation else self.train_sampling_params).copy()
        params.pop("max_tokens", None)
        max_tokens = kwargs.pop("max_tokens", kwargs.pop("max_new_tokens", self.max_response_length))
        max_tokens = min(max_tokens, self.max_model_length - input_length)
        for key in ("temperature", "top_p", "top_k"):
            if key in kwargs:
                params[key] = kwargs[key]
        response = await self.sampling_client.sample_async(
            prompt=_flat_token_input_to_model_input(token_input),
            num_samples=1,
            sampling_params=tinker.types.SamplingParams(max_tokens=max_tokens, stop=self.stop_sequences, **params),
        )
        return response.sequences[0]

    def assemble_model_output(self, token_input, token_output):
        tokens, logprobs = token_output.tokens, token_output.logprobs
        message, _ = self.renderer.parse_response(tokens)
        content, reasoning, tool_calls = _parse_tinker_message(message)
        prompt_ids = []
        for elem in token_input:
            if isinstance(elem, tinker.EncodedTextChunk):
                prompt_ids.extend(elem.tokens)
            else:
                prompt_ids.append(elem)
        return ModelOutput(
            text=self.tokenizer.decode(tokens, skip_special_tokens=True),
            content=content,
            reasoning=reasoning,
            tool_calls=tool_calls,
            prompt_ids=prompt_ids,
            completion_ids=tokens,
            logprobs=logprobs,
            prompt_length=_flat_token_input_length(token_input),
            completion_length=len(tokens),
            finish_reason=token_output.stop_reason,
        )

    async def _get_model_response(self, messages, **kwargs):
        kwargs.pop("application_id", None)
        tools = kwargs.pop("tools", [])
        kwargs.pop("accumulate_reasoning", None)
        kwargs.pop("reasoning_effort", None)
        tinker_messages = _convert_openai_messages(messages)
        if tools:
            tinker_messages = _prepare_messages_with_tools(self.renderer, tinker_messages, tools)
        token_input = self.renderer.build_generation_prompt(tinker_messages).chunks
        sampled = await self.get_token_output_from_token_input(token_input=token_input, **kwargs)
        return self.assemble_model_output(token_input=token_input, token_output=sampled)
