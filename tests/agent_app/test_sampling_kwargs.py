"""``openai_sampling_kwargs``: a trainer's sampling parameters as keywords the OpenAI SDK accepts."""

import inspect

from agent_app import openai_sampling_kwargs
from agent_app._sampling import OPENAI_SAMPLING_NAMES


def test_openai_parameters_are_keywords_and_the_servers_own_go_in_the_request_body():
    verl = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}
    assert openai_sampling_kwargs({**verl, "min_p": 0.05, "max_tokens": None}) == {
        "temperature": 1.0,
        "top_p": 1.0,
        "logprobs": True,
        "extra_body": {"top_k": -1, "repetition_penalty": 1.0, "min_p": 0.05},
    }


def test_no_parameters_give_no_keywords_and_a_given_extra_body_is_merged():
    assert openai_sampling_kwargs(None) == {} == openai_sampling_kwargs({"temperature": None})
    template = {"chat_template_kwargs": {"enable_thinking": False}}
    assert openai_sampling_kwargs({"top_k": 20, "extra_body": template}) == {"extra_body": {"top_k": 20, **template}}


def test_every_keyword_is_one_the_openai_sdk_takes():
    from openai.resources.chat.completions import AsyncCompletions  # here: the SDK takes 1.4 s to import

    assert OPENAI_SAMPLING_NAMES <= set(inspect.signature(AsyncCompletions.create).parameters)
