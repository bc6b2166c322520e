"""Supervised local workers: a killed dispatcher, finisher or sweeper environment is replaced, as in Lambda."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest
from e2e_support import connect, emulator_counters, scripted_stack, serving, wait_until

from local_stack._process import pid_alive
from local_stack.stack import LAMBDA_INITIAL_POLLERS, LocalStack
from local_stack.worker import WorkerSettings
from rollout_contract import Status

pytestmark = pytest.mark.e2e

EXP = "e2e-supervised"
RESTART_WAIT_S = 90.0


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with serving(scripted_stack(tmp_path_factory.mktemp("supervised"), EXP)) as running:
        yield running


def _worker_pid(stack: LocalStack, name: str) -> int:
    return int(stack.worker_pid_file(name).read_text())


def test_sigkilled_workers_are_restarted_and_rollouts_still_complete_and_get_stopped(stack: LocalStack) -> None:
    # GIVEN every worker environment of the experiment (two dispatchers, five finishers as Lambda runs from the
    # start, the sweeper) SIGKILLed
    names = stack.worker_names()
    assert len(names) == 2 + LAMBDA_INITIAL_POLLERS + 1
    killed = {name: _worker_pid(stack, name) for name in names}
    for pid in killed.values():
        os.kill(pid, signal.SIGKILL)
    stops_before = emulator_counters(stack)["stops"]
    # A killed environment's SQS long poll stays open in the queue service until its wait ends, and a message that
    # arrives meanwhile is taken by it and comes back only after the queue's visibility timeout (6 function
    # timeouts, as in AWS; that path is the soak benchmark's). Submitting after those polls end tests the restart.
    time.sleep(WorkerSettings().wait_time_s + 1.0)

    # WHEN rollouts are submitted to the replaced environments
    with connect(stack, EXP) as client:
        futures = client.submit([({"action": "succeed", "sleep_s": 0.5}, f"sup-{i}") for i in range(3)], timeout=60)
        results = [future.result(timeout=180) for future in futures]

    # THEN each environment was replaced by a new process, the rollouts succeeded, and their sessions were stopped
    for name, pid in killed.items():
        assert not pid_alive(pid)
        assert wait_until(lambda name=name, pid=pid: _worker_pid(stack, name) != pid, RESTART_WAIT_S)
        assert pid_alive(_worker_pid(stack, name))
    assert [r.status for r in results] == [Status.SUCCEEDED] * 3
    assert wait_until(lambda: emulator_counters(stack)["stops"] >= stops_before + 3, RESTART_WAIT_S)
    assert all(process.alive() for process in stack.processes)
