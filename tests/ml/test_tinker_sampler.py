"""The Tinker adapter's sampler: an agent's chat calls, sampled through the Tinker API, in the gateway's fields.

Against the local Tinker endpoint (a real process): a chat call with the lookup tool comes back with the vLLM token
fields the token gateway records (``prompt_token_ids``, ``token_ids``, one logprob per token, ``weight_version``),
a ``<tool_call>`` token becomes the OpenAI tool call, and the next turn's prompt extends the previous prompt and
completion token for token, so the trainer's assembly joins the calls into one row.
"""

import httpx
import pytest

torch = pytest.importorskip("torch")
tinker = pytest.importorskip("tinker")

from examples.grpo_local.task import LOOKUP_TOOL  # noqa: E402
from local_stack.tiny_policy.tinker_renderer import TinyRenderer  # noqa: E402
from trainer_client.backends._tinker_sampler import TinkerSampler  # noqa: E402

pytestmark = pytest.mark.e2e

MODEL = "tiny-policy"


@pytest.fixture(scope="module")
def sampler(tinker_endpoint):
    with tinker.ServiceClient(base_url=tinker_endpoint, api_key="tml-local") as service:
        training = service.create_lora_training_client(base_model=MODEL, rank=4).result()
        with TinkerSampler(TinyRenderer(), model_name=MODEL, max_tokens=8, max_context=150) as sampler:
            sampler.use(training.save_weights_and_get_sampling_client().result(), 0)
            yield sampler


def _chat(sampler, messages, **extra):
    body = {"model": MODEL, "messages": messages, "tools": [LOOKUP_TOOL], "temperature": 1.0, **extra}
    return httpx.post(f"{sampler.url}/chat/completions", json=body, timeout=60).raise_for_status().json()


def test_a_call_carries_the_gateways_token_fields_and_the_next_turn_extends_it(sampler):
    messages = [{"role": "user", "content": "what is the secret digit?"}]
    renderer = TinyRenderer()
    # Seeds until the policy calls the tool (an untrained policy does now and then), so both turns are seen.
    for seed in range(200):
        first = _chat(sampler, messages, seed=seed)
        if first["choices"][0]["finish_reason"] == "tool_calls":
            break
    else:
        pytest.fail("no seed in 200 made the tiny policy call the tool")
    choice = first["choices"][0]
    assert first["prompt_token_ids"] == renderer.prompt_ids(messages, [LOOKUP_TOOL])
    assert first["weight_version"] == 0
    assert len(choice["logprobs"]["content"]) == len(choice["token_ids"]) >= 1
    assert all(entry["logprob"] <= 0 for entry in choice["logprobs"]["content"])
    call = choice["message"]["tool_calls"][0]
    assert call["function"] == {"name": LOOKUP_TOOL["function"]["name"], "arguments": "{}"}

    messages += [
        {"role": "assistant", "content": choice["message"]["content"], "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": "7"},
    ]
    second = _chat(sampler, messages, seed=1)
    previous = first["prompt_token_ids"] + choice["token_ids"]
    assert second["prompt_token_ids"][: len(previous)] == previous


def test_refusals_say_what_to_send(sampler):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": True}
    response = httpx.post(f"{sampler.url}/chat/completions", json=body, timeout=60)
    assert response.status_code == 400 and "stream=false" in response.json()["error"]["message"]
    body = {"model": MODEL, "messages": [{"role": "user", "content": "x" * 150}]}
    response = httpx.post(f"{sampler.url}/chat/completions", json=body, timeout=60)
    assert response.status_code == 400 and "max_context_tokens is 150" in response.json()["error"]["message"]


def test_the_hf_renderer_renders_the_chat_template_and_reads_hermes_tool_calls(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from trainer_client.backends._tinker_sampler import HfChatRenderer

    words = ["<pad>", "<eos>", "<unk>", "user", "assistant", "hi", "<tool_call>", '{"name":', '"lookup",']
    words += ['"arguments":', "{}}", "</tool_call>", "ok"]
    model = Tokenizer(models.WordLevel({word: i for i, word in enumerate(words)}, unk_token="<unk>"))
    model.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=model, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")
    tokenizer.chat_template = (
        "{% for m in messages %}{{ m['role'] }} {{ m['content'] }} {% endfor %}"
        "{% if add_generation_prompt %}assistant {% endif %}"
    )
    tokenizer.save_pretrained(tmp_path)
    renderer = HfChatRenderer(str(tmp_path))
    ids = {word: i for i, word in enumerate(words)}

    assert renderer.prompt_ids([{"role": "user", "content": "hi"}], []) == [ids["user"], ids["hi"], ids["assistant"]]
    assert renderer.stop_ids([]) == [ids["<eos>"]]
    call = [ids[w] for w in ("<tool_call>", '{"name":', '"lookup",', '"arguments":', "{}}", "</tool_call>", "<eos>")]
    message, finish_reason = renderer.message(call, True, {})
    assert finish_reason == "tool_calls" and message["content"] == ""
    assert [c["function"] for c in message["tool_calls"]] == [{"name": "lookup", "arguments": "{}"}]
    assert renderer.message([ids["ok"]], False, {}) == ({"role": "assistant", "content": "ok"}, "length")
