"""Differential on the local stack: ART 0.2.0's unmodified client and agent against ours, each side on its own.

Two stacks, one after the other: one hosts ART's own ``AgentCoreRLApp`` agent (``agents/art_agent.py``, plain
``app.run()`` on 8080, as ACR runs it), the other the same handler on ``agent_app``. On each, ART's unmodified
``RolloutClient`` and ours run the same payloads, and the documents each client returns are compared field by
field; ART's agent runs under our trainer (statuses from ART's fields, sessions stopped, slots freed), ours
under ART's client; and ART's client on our experiment does not starve our client (our poller deletes its
events; ``benchmarks/art_traffic_bench.py`` measures our latency with and without it).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agentcore_rl_toolkit")

TESTS = Path(__file__).parents[1]
AGENTS = Path(__file__).parent / "agents"
sys.path[:0] = [str(TESTS / "e2e"), str(AGENTS)]

from agentcore_rl_toolkit import RolloutClient as ArtClient  # noqa: E402
from e2e_support import connect, emulator_counters, serving, wait_until  # noqa: E402

from local_stack.moto_server import LOCAL_ACCESS_KEYS  # noqa: E402
from local_stack.stack import LocalStack, StackSettings  # noqa: E402
from rollout_contract import META_FIELD, ExperimentResources, Status  # noqa: E402
from trainer_client import RolloutClient  # noqa: E402

pytestmark = pytest.mark.e2e

EXP = "artdiff"
#: Cases run through both clients, and the status our trainer must give each (ART's fields decide it).
EXPECTED = {
    "reward": Status.SUCCEEDED,
    "reward_list": Status.SUCCEEDED,
    "rewards_str": Status.SUCCEEDED,
    "rewards_dict": Status.AGENT_ERROR,  # not a number or a list of them: InvalidReward
    "own_status": Status.SUCCEEDED,
    "own_status_code_and_stop_reason": Status.AGENT_ERROR,
    "rewards_nan": Status.AGENT_ERROR,
    "raises": Status.AGENT_ERROR,
    "returns_float": Status.AGENT_ERROR,
    "unserializable_object": Status.AGENT_ERROR,
}
#: ART's own agent signs nothing: our trainer takes its results only when told to (D100); ours are proven either way.
ART_RESULTS = "accept"
#: Fields that name the rollout (each client picks its own ids) or hold what the client sent.
ROLLOUT_FIELDS = {"input_id", "result_key", "payload", META_FIELD}


@pytest.fixture(scope="module", params=["art_agent", "our_agent"])
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    settings = StackSettings(
        run_dir=tmp_path_factory.mktemp(request.param),
        experiments=(EXP,),
        agent_command=(sys.executable, str(AGENTS / f"{request.param}.py")),
        gateway=False,
        sweep_interval_s=1.0,
        runtime_options={"preload": ("boto3", "uvicorn", "bedrock_agentcore.runtime")},
    )
    with serving(LocalStack(settings)) as running:
        yield running


@pytest.fixture
def art_client(stack: LocalStack, monkeypatch: pytest.MonkeyPatch) -> ArtClient:
    """ART's client on our experiment. It HEAD-polls, so it needs s3:ListBucket (a missing key is 403 without):
    it runs with the administrator's key, as an ART user's role would hold that grant."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", LOCAL_ACCESS_KEYS["admin"])
    descriptor = stack.descriptors[EXP]
    return ArtClient(descriptor.runtime_arn, descriptor.results_bucket, EXP)


def _view(document: dict[str, Any]) -> str:
    view = {k: v for k, v in document.items() if k not in ROLLOUT_FIELDS}
    if isinstance(view.get("traceback"), str):
        view["traceback"] = view["traceback"].rstrip().splitlines()[-1]
    return json.dumps(view, sort_keys=True)


def test_arts_client_and_ours_return_the_same_documents(stack: LocalStack, art_client: ArtClient):
    # GIVEN the same payloads for ART's unmodified client and for ours
    cases = sorted(EXPECTED)
    payloads = [{"case": case} for case in cases]

    # WHEN each runs them as a batch, several sessions at once
    arts = {item.index: item for item in art_client.run_batch(payloads, max_concurrent_sessions=5, timeout=60)}
    with connect(stack, EXP, unproven_results=ART_RESULTS) as client:
        ours = {item.index: item for item in client.run_batch(payloads, 5, 60, input_ids=cases)}

    # THEN ART's client got every document (it says success for any dict), ours gave each the status ART's
    # fields say, and the documents are the same field by field
    for index, case in enumerate(cases):
        art_item, our_item = arts[index], ours[index]
        assert art_item.success and isinstance(art_item.result, dict), (case, art_item.error)
        assert our_item.result is not None and our_item.result.status is EXPECTED[case], case
        assert our_item.success is (EXPECTED[case] is Status.SUCCEEDED)
        assert _view(our_item.result) == _view(art_item.result), case
        assert our_item.result.error is None or our_item.error  # a failure says why, as a string


def test_every_session_of_the_agent_is_stopped_and_its_slot_freed_under_our_trainer(stack: LocalStack):
    # GIVEN our trainer and the stack's agent (on one stack, ART's own agent)
    stops_before = emulator_counters(stack)["stops"]

    # WHEN a batch of six runs, six sessions at once
    with connect(stack, EXP, unproven_results=ART_RESULTS) as client:
        items = list(client.run_batch([{"case": "reward"}] * 6, 6, 60))

        # THEN every rollout succeeded, the finisher stopped every session and no slot is held
        assert [item.result.reward for item in items] == [1.0] * 6
        assert wait_until(lambda: client.status(recent=0).rollouts_in_flight == 0)
    assert wait_until(lambda: emulator_counters(stack)["stops"] >= stops_before + 6)


def test_a_rollout_past_its_deadline_ends_timed_out_by_the_sweeper_and_its_session_is_stopped(stack: LocalStack):
    # GIVEN a rollout of the stack's agent (on one stack, ART's own) that outlives its 3 s deadline
    stops_before = emulator_counters(stack)["stops"]
    with connect(stack, EXP, unproven_results=ART_RESULTS) as client:
        future = client.invoke({"case": "reward", "sleep_s": 120}, input_id="late", timeout=3)

        # WHEN the deadline passes THEN the sweeper's timed_out reaches our trainer, the finisher stops the
        # session and frees its slot
        assert future.result(timeout=60).status is Status.TIMED_OUT
        assert wait_until(lambda: client.status(recent=0).rollouts_in_flight == 0)
    assert wait_until(lambda: emulator_counters(stack)["stops"] >= stops_before + 1)


def test_arts_client_on_our_experiment_never_slows_our_client(stack: LocalStack, art_client: ArtClient):
    # GIVEN ART's client running 24 rollouts on our experiment (it reads S3, never the completion queue), and a
    # rollout of ours pending throughout, so our poller keeps receiving
    with connect(stack, EXP, unproven_results=ART_RESULTS) as client, ThreadPoolExecutor(1) as pool:
        watcher = client.invoke({"case": "reward", "sleep_s": 300}, input_id="watcher")
        art_batch = pool.submit(
            lambda: list(art_client.run_batch([{"case": "reward"}] * 24, max_concurrent_sessions=6, timeout=60))
        )

        # WHEN our client runs its own rollouts at the same time
        futures = [client.invoke({"case": "reward"}, input_id=f"ours-{i}") for i in range(12)]
        results = [future.result(timeout=60) for future in futures]
        art_items = art_batch.result(timeout=120)

        # THEN ours all came back, ART's client got all of its own, and our poller deleted ART's events (no
        # trainer of ours owns them): the completion queue empties with nothing in its DLQ. Before the events had
        # owners (D55) they were handed back and circulated, and ours timed out at 45-60 s after 15-30 of ART's;
        # benchmarks/art_traffic_bench.py measures the latency.
        assert all(result.ok for result in results)
        assert len(art_items) == 24 and all(item.success for item in art_items)
        assert wait_until(lambda: completion_messages(client) == [0, 0], timeout_s=30), completion_messages(client)
        assert not watcher.done()
        watcher.cancel()


def completion_messages(client: RolloutClient) -> list[int]:
    """Messages (visible and in flight) in the experiment's completion queue and in its DLQ."""
    completion = ExperimentResources.for_experiment(EXP).completion_queue
    depths = {queue.name: queue.visible + queue.in_flight for queue in client.status(recent=0).queues}
    return [depths[completion.name], depths[completion.dlq_name]]
