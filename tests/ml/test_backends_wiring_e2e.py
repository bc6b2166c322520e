"""No address typed by hand: the adapters give the experiment's gateway the framework's own inference servers.

On the real local stack (moto, emulator, workers, the multi-turn agent behind the gateway), the framework's
servers are two more model endpoints on ports the OS chose when they started. The stack's own model is
stopped once they run, so a rollout that succeeds with token traces sampled from them: the adapter told the
gateway where they are, and nothing else did.
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

from backends_e2e import gateway_traces, multiturn_fixtures  # noqa: E402

from local_stack._process import ManagedProcess  # noqa: E402
from local_stack.model_endpoint.process import model_endpoint_process  # noqa: E402
from local_stack.stack import LocalStack  # noqa: E402
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
            server = model_endpoint_process(run_dir=tmp_path_factory.mktemp(f"server{index}"), base_env=os.environ)
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
    return worker_urls(httpx.get(f"{stack.gateway_url}/admin/workers", timeout=10).json())


async def test_verls_rollout_servers_serve_the_agents_without_an_address_typed(stack, client, framework_servers):
    # GIVEN verl's server client over the load balancer of its two replicas (server ids are host:port)
    config = trainer_config()
    servers = LLMServerClient(config, ServerIds([url.removeprefix("http://") for url in framework_servers]))
    rows = [
        {"raw_prompt": [{"role": "user", "content": "Say hello."}], "uid": "q1", "index": 0, "extra_info": {}}
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
