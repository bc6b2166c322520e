"""The tiny policy's tokenizer and chat template (no PyTorch needed), and the error when PyTorch is missing."""

import importlib.util

import pytest

from local_stack.model_endpoint import EndpointSettings
from local_stack.tiny_policy.chat_template import VOCAB_SIZE, ChatTokenizer, VocabularyError

TOKENIZER = ChatTokenizer()
LOOKUP = {"type": "function", "function": {"name": "lookup", "parameters": {}}}


def test_ids_and_text_round_trip_both_ways():
    text = 'What\'s 2+2?\n#### 4 {"a": [1]} ~'
    assert TOKENIZER.decode(TOKENIZER.encode(text)) == text
    ids = list(range(VOCAB_SIZE))
    assert TOKENIZER.encode(TOKENIZER.decode(ids)) == ids
    assert TOKENIZER.encode("<|im_end|>") == [TOKENIZER.im_end_id]


def test_text_outside_the_vocabulary_is_refused_not_replaced():
    with pytest.raises(VocabularyError, match="'é' is outside"):
        TOKENIZER.encode("café")


def test_each_turn_extends_the_previous_prompt_and_completion_token_for_token():
    # GIVEN a first prompt and a completion ending in a tool call (text before it is the content)
    user = [{"role": "user", "content": "secret?"}]
    first = TOKENIZER.render_prompt(user, [LOOKUP])
    completion = TOKENIZER.encode("ok") + [TOKENIZER.tool_call_id]
    # WHEN the agent sends the assistant message back with the tool's result
    call = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
    turn = [*user, {"role": "assistant", "content": "ok", "tool_calls": [call]}, {"role": "tool", "content": "7"}]
    second = TOKENIZER.render_prompt(turn, [LOOKUP])
    # THEN the new prompt is the old one, the completion, then only the spliced tool message and generation prompt
    assert second[: len(first) + len(completion)] == first + completion
    spliced = TOKENIZER.decode(second[len(first) + len(completion) :])
    assert spliced == "<|im_start|>tool\n7<|im_end|><|im_start|>assistant\n"
    assert TOKENIZER.decode(first).startswith("<|bos|><|im_start|>system\ntools: lookup<|im_end|>")


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="PyTorch is installed here")
def test_the_transformer_policy_without_pytorch_says_to_run_make_ml_env():
    with pytest.raises(ValueError, match="make ml-env"):
        EndpointSettings(policy="transformer")


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="PyTorch is installed here")
def test_rollouts_local_up_with_the_transformer_policy_without_pytorch_starts_nothing(tmp_path, capsys):
    from trainer_client._cli import main

    assert main(["local", "up", "--policy", "transformer", "--run-dir", str(tmp_path)]) == 2
    assert "make ml-env" in capsys.readouterr().err
    assert not (tmp_path / "state.json").exists()


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="PyTorch is installed here")
def test_rollouts_local_up_tinker_serves_the_transformer_policy_so_without_pytorch_starts_nothing(tmp_path, capsys):
    from trainer_client._cli import main

    # --tinker implies --policy transformer: the same refusal, naming the ML environment.
    assert main(["local", "up", "--tinker", "--run-dir", str(tmp_path)]) == 2
    assert "make ml-env" in capsys.readouterr().err
    assert not (tmp_path / "state.json").exists()
