"""``trainer_client.gateway`` applies a session's ``sampling_params`` to its model calls, as rLLM's gateway does.

rLLM's engine creates each rollout's gateway session with its rollout engine's sampling parameters
(``POST /sessions {"session_id", "sampling_params"}``) and its gateway overwrites those keys in every model
call of the session (rllm 9beb6e0f, ``rllm-model-gateway`` ``middleware.py`` ``_mutate``). The gateway runs
as a real server in front of a stand-in upstream that records the bodies it receives; rLLM's side is its
``GatewayManager`` (tests/stand_ins/rllm, or a real rLLM tree: see the README there).
"""

from __future__ import annotations

import asyncio
import inspect
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("rllm_model_gateway")

sys.path.insert(0, str(Path(__file__).parents[1] / "stand_ins" / "rllm"))

from rllm_model_gateway import GatewayConfig  # noqa: E402
from rllm_tree import REAL, rllm_paths  # noqa: E402
from starlette.applications import Starlette  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import JSONResponse  # noqa: E402
from starlette.routing import Route  # noqa: E402
from trainer_support import served  # noqa: E402

from trainer_client.gateway import create_settled_app  # noqa: E402

sys.path[:0] = rllm_paths()
from rllm.gateway.manager import GatewayManager  # noqa: E402
from rllm_model_gateway.client import GatewayClient  # noqa: E402

if REAL and "sampling_params" not in inspect.signature(GatewayClient.create_session).parameters:
    pytest.skip(
        "rLLM's GatewayManager here runs on PyPI's rllm-model-gateway 0.1.0 client, whose create_session has no "
        "sampling_params: real rLLM needs its own rllm-model-gateway (see tests/stand_ins/rllm/README.md)",
        allow_module_level=True,
    )

#: What verl's rollout engine sends as rLLM's train sampling parameters (VerlEngine.train_sampling_params).
TRAIN_PARAMS = {"temperature": 0.6, "top_k": -1, "top_p": 0.95, "logprobs": 1}


class _Upstream:
    """A vLLM-shaped chat endpoint that records every request body."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    async def chat(self, request: Request) -> JSONResponse:
        body = await request.json()
        self.bodies.append(body)
        return JSONResponse(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 0,
                "model": body.get("model", ""),
                "prompt_token_ids": [1, 2, 3],
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "2"},
                        "finish_reason": "stop",
                        "token_ids": [7, 8],
                        "logprobs": {"content": [{"token": "2", "logprob": -0.5, "top_logprobs": []}]},
                    }
                ],
                "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
            }
        )

    def app(self) -> Starlette:
        async def health(_: Request) -> JSONResponse:
            return JSONResponse({"status": "ok"})

        return Starlette(routes=[Route("/v1/chat/completions", self.chat, methods=["POST"]), Route("/health", health)])


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[_Upstream, str]]:
    model = _Upstream()
    with served(model.app()) as url:
        yield model, url


@pytest.fixture(scope="module")
def gateway_url(upstream: tuple[_Upstream, str]) -> Iterator[str]:
    config = GatewayConfig(workers=[{"url": f"{upstream[1]}/v1"}], store_worker="memory", sync_traces=True)
    with served(create_settled_app(config)) as url:
        yield url


@pytest.fixture
def model(upstream: tuple[_Upstream, str]) -> _Upstream:
    upstream[0].bodies.clear()
    return upstream[0]


class _Config(dict[str, Any]):
    """What rLLM reads of its Hydra config here (``config.rllm.get(...)``, ``config.get(...)``), without OmegaConf."""

    __getattr__ = dict.__getitem__


def _rllms_gateway(gateway_url: str, train: dict[str, Any], val: dict[str, Any]) -> Any:
    """rLLM's GatewayManager on the gateway at ``gateway_url``, with a rollout engine's per-mode parameters."""
    host, port = gateway_url.removeprefix("http://").split(":")
    manager = GatewayManager(_Config(rllm={"gateway": {"host": host, "port": int(port)}}))
    manager._train_sampling_params, manager._val_sampling_params = train, val  # what start(rollout_engine) takes
    return manager


def _agent_call(session_url: str, **params: Any) -> httpx.Response:
    body = {"model": "policy", "messages": [{"role": "user", "content": "1+1?"}], **params}
    response = httpx.post(f"{session_url}/chat/completions", json=body, timeout=30)
    response.raise_for_status()
    return response


async def test_rllms_session_sampling_params_overwrite_the_agents_and_the_rest_pass_through(gateway_url, model):
    # GIVEN rLLM's engine creating a training session (its rollout engine's params) and a validation one (none)
    manager = _rllms_gateway(gateway_url, train=TRAIN_PARAMS, val={})
    train_sid, val_sid = str(uuid.uuid4()), str(uuid.uuid4())
    assert await manager.acreate_session(train_sid) == train_sid
    assert await manager.acreate_session(val_sid, is_validation=True) == val_sid
    # WHEN the agent of each calls the model with its own temperature, max_tokens and stop
    for sid in (train_sid, val_sid):
        await asyncio.to_thread(_agent_call, manager.get_session_url(sid), temperature=1.0, max_tokens=64, stop=["\n"])
    # THEN the training call reached the model with the session's keys, the agent's others, the gateway's additions
    trained, validated = model.bodies
    assert {key: trained[key] for key in TRAIN_PARAMS} == TRAIN_PARAMS
    assert (trained["max_tokens"], trained["stop"], trained["messages"][0]["content"]) == (64, ["\n"], "1+1?")
    assert trained["return_token_ids"] is True
    # AND the session without params is the agent's call as sent (plus the gateway's token fields)
    assert (validated["temperature"], validated["max_tokens"]) == (1.0, 64)
    assert not {"top_k", "top_p"} & validated.keys()
    # AND rLLM's trace read finds the call's tokens under its session
    (trace,) = await manager.aget_traces(train_sid)
    assert (trace.prompt_token_ids, trace.completion_token_ids, trace.logprobs) == ([1, 2, 3], [7, 8], [-0.5])


async def test_deleting_a_session_forgets_its_sampling_params(gateway_url, model):
    # GIVEN a session created with sampling params, used once, then deleted as rLLM's engine deletes it
    manager = _rllms_gateway(gateway_url, train={"temperature": 0.0}, val={})
    sid = str(uuid.uuid4())
    await manager.acreate_session(sid)
    await asyncio.to_thread(_agent_call, manager.get_session_url(sid), temperature=0.7)
    assert await manager.adelete_session(sid) == 1
    # WHEN a call comes under the same id again (the gateway creates sessions implicitly)
    await asyncio.to_thread(_agent_call, manager.get_session_url(sid), temperature=0.7)
    # THEN only the first call had the session's temperature
    assert [body["temperature"] for body in model.bodies] == [0.0, 0.7]


def test_a_session_the_gateway_names_gets_its_sampling_params_and_a_non_object_is_refused(gateway_url, model):
    # GIVEN POST /sessions without a session id (the gateway makes one), with sampling params
    created = httpx.post(f"{gateway_url}/sessions", json={"sampling_params": {"top_p": 0.5}}, timeout=10)
    created.raise_for_status()
    sid = created.json()["session_id"]
    # WHEN its agent calls the model THEN the call has the session's top_p
    _agent_call(f"{gateway_url}/sessions/{sid}/v1", top_p=1.0)
    assert model.bodies[-1]["top_p"] == 0.5
    # AND sampling params that are not an object are refused, saying what is expected
    refused = httpx.post(f"{gateway_url}/sessions", json={"session_id": "x", "sampling_params": [0.5]}, timeout=10)
    assert refused.status_code == 422 and "JSON object" in refused.json()["error"]
