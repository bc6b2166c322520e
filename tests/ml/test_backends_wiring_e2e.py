"""No address typed by hand, MoE routing replayed, weight versions measured: each adapter on the real local stack.

On the real local stack (moto, emulator, workers, the multi-turn agent behind the gateway), the framework's
servers are two more model endpoints on ports the OS chose when they started, each a tiny mixture of experts
that returns its routing as vLLM does. The stack's own model is stopped once they run, so a rollout that
succeeds with token traces sampled from them: the adapter told the gateway where they are, and nothing else
did. With the framework's router replay on, the experts it receives for every token of every row (the
multi-turn agent breaks the token prefix between its two calls) are those the server routed; and the weight
version each adapter reports is the one its rollouts' traces carry.
"""

from __future__ import annotations

import asyncio
import os
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

pytest.importorskip("verl")
TESTS = Path(__file__).parents[1]
sys.path[:0] = [str(Path(__file__).parent), str(TESTS / "backends")]

with warnings.catch_warnings():  # verl and Ray warn at import about their own dependencies
    warnings.simplefilter("ignore")
    from verl.workers.rollout.llm_server import LLMServerClient
    from verl_support import LOOP_ENTRY, ServerIds, build_loop, tokenizer, trainer_config

from slime_support import rollout_manager, slime_args  # noqa: E402, I001

from backends_e2e import gateway_traces, multiturn_fixtures  # noqa: E402

from local_stack._process import ManagedProcess  # noqa: E402
from local_stack.gateway import admin_auth  # noqa: E402
from local_stack.model_endpoint import EndpointSettings  # noqa: E402
from local_stack.model_endpoint.moe import routed_experts  # noqa: E402
from local_stack.model_endpoint.process import model_endpoint_process  # noqa: E402
from local_stack.stack import LocalStack  # noqa: E402
from trainer_client.backends import slime as backend_slime  # noqa: E402
from trainer_client.backends._workers import worker_urls  # noqa: E402

pytestmark = pytest.mark.e2e

EXP = "wiring-e2e"

stack, client = multiturn_fixtures(EXP)


@pytest.fixture(scope="module")
def framework_servers(stack: LocalStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """Two model endpoints started now (ports chosen by the OS), and the stack's own model stopped."""
    servers: list[ManagedProcess] = []
    try:
        for index in range(2):
            server = model_endpoint_process(
                run_dir=tmp_path_factory.mktemp(f"server{index}"),
                base_env=os.environ,
                settings=EndpointSettings(moe=True),
            )
            server.start()
            servers.append(server)
        for server in servers:
            server.wait_ready(30)
        next(process for process in stack.processes if process.name == "model").stop()
        yield [str(server.url) for server in servers]
    finally:
        for server in servers:
            server.stop()


def gateway_workers(stack: LocalStack) -> list[str]:
    auth = admin_auth(str(stack.moto_url), stack.settings.experiments[0])  # admin routes need the admin key (D100)
    return worker_urls(httpx.get(f"{stack.gateway_url}/admin/workers", timeout=10, auth=auth).json())


def replayed(sequence: list[int]) -> list[list[list[int]]]:
    """What the servers routed for ``sequence``: every token fed through the model (all but the last)."""
    return routed_experts(sequence)


async def test_verls_rollout_servers_serve_the_agents_without_an_address_typed(stack, client, framework_servers):
    # GIVEN verl's server client over the load balancer of its two replicas (server ids are host:port), and
    # verl's router replay on
    config = trainer_config("actor_rollout_ref.rollout.enable_rollout_routing_replay=true")
    servers = LLMServerClient(config, ServerIds([url.removeprefix("http://") for url in framework_servers]))
    rows = [
        {"raw_prompt": [{"role": "user", "content": "Say hello."}], "uid": "q1", "index": 0, "global_steps": 3}
        for _ in range(4)
    ]
    # WHEN verl's worker runs a group of four samples, one loop object each
    loops = [build_loop({**LOOP_ENTRY, "experiment": EXP}, config, tokenizer(), servers) for _ in rows]
    results = await asyncio.gather(
        *(loop.run({"logprobs": True}, **row) for loop, row in zip(loops, rows, strict=True))
    )
    # THEN the gateway routes to exactly verl's servers, and every rollout trained on tokens they sampled
    assert sorted(gateway_workers(stack)) == sorted(f"{url}/v1" for url in framework_servers)
    for outputs in results:
        assert {output.extra_fields["rollout_status"] for output in outputs} == {"succeeded"}
        traces = gateway_traces(stack, outputs[0].extra_fields["rollout_session_id"])
        assert [output.response_ids for output in outputs] == [trace["completion_token_ids"] for trace in traces]
        assert outputs[0].extra_fields["sampled_tokens"] == outputs[0].extra_fields["trained_tokens"] > 0
        # AND each row's experts are those the server routed for its tokens, through the prefix break
        assert len(outputs) == 2
        for output in outputs:
            sequence = output.prompt_ids + output.response_ids
            assert output.routed_experts.tolist()[: len(sequence) - 1] == replayed(sequence)
        # AND the version verl's loop reported (the step it ran) is the one every call's trace carries
        assert {(o.extra_fields["min_global_steps"], o.extra_fields["max_global_steps"]) for o in outputs} == {(3, 3)}


def test_slimes_router_serves_the_agents_and_its_replay_gets_the_servers_experts(
    stack, client, framework_servers, tmp_path, monkeypatch
):
    # GIVEN slime's args at its defaults with the README's hooks, its router at the second server's address (as
    # slime starts it), and slime's router replay on
    monkeypatch.chdir(TESTS.parent)
    prompt = {"prompt": "Say hello.", "answer": "hello", "metadata": {"reward": 1.0}}
    config = {"agentcore_experiment": EXP, "agentcore_rollout_timeout_s": 30}
    args = slime_args(tmp_path, [prompt], "--use-rollout-routing-replay", config=config)
    host, port = framework_servers[1].removeprefix("http://").split(":")
    args.sglang_router_ip, args.sglang_router_port = host, int(port)
    # WHEN slime runs step 5
    output = backend_slime.generate_rollout(args, 5, rollout_manager(args).data_source)
    # THEN the gateway routes to slime's router alone and the step's samples came from it
    assert gateway_workers(stack) == [f"{framework_servers[1]}/v1"]
    samples = [sample for group in output.samples for rollout in group for sample in rollout]
    assert {sample.metadata["agentcore"]["status"] for sample in samples} == {"succeeded"}
    assert output.metrics["agentcore/trained_tokens"] == output.metrics["agentcore/sampled_tokens"] > 0
    # AND every row carries the experts the server routed for its tokens, and the weights of step 5
    for sample in samples:
        assert sample.rollout_routed_experts.tolist() == replayed(sample.tokens)
        assert set(sample.weight_versions) == {"5"}
    assert (output.metrics["agentcore/staleness_p50"], output.metrics["agentcore/staleness_max"]) == (0, 0)
