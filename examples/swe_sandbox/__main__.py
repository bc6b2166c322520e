"""``.venv-demo/bin/python -m examples.swe_sandbox [--experiment NAME] [--group-size 4]``: GRPO groups in sandboxes.

Each task gets a group of episodes, each in its own sandbox (its own session, slot and deadline), run at once;
the group's rewards become advantages as in training (``trainer_client.group_advantages``). Without
``--experiment`` a local sandbox stack is started for the run (no AWS account) and stopped after.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

from examples.swe_sandbox.loop import Episode, run_episode, scripted_policy
from examples.swe_sandbox.tasks import TASKS, Task
from trainer_client import group_advantages
from trainer_client.sandbox import SandboxClient

LOCAL_EXPERIMENT = "swe-sandbox"


@contextlib.contextmanager
def _experiment(name: str | None) -> Iterator[str]:
    """``name``, or a local sandbox stack's experiment for the block."""
    if name is not None:
        yield name
        return
    from local_stack._process import environment
    from local_stack.sandbox import sandbox_settings
    from local_stack.stack import LocalStack

    settings = sandbox_settings(run_dir=tempfile.mkdtemp(prefix="swe-sandbox-"), experiments=(LOCAL_EXPERIMENT,))
    with LocalStack(settings) as stack, environment(stack.env):
        yield LOCAL_EXPERIMENT


def _episode(client: SandboxClient, task: Task, seed: int) -> Episode:
    with client.start(input_id=task.task_id, timeout=600) as sandbox:
        return run_episode(sandbox, task, scripted_policy(random.Random(seed)))


def main(argv: list[str] | None = None) -> None:
    """Run one GRPO step's episodes and print each group."""
    parser = argparse.ArgumentParser(prog="python -m examples.swe_sandbox", description=__doc__)
    parser.add_argument("--experiment", help="a sandbox experiment (default: start a local sandbox stack)")
    parser.add_argument("--group-size", type=int, default=4, help="episodes per task")
    parser.add_argument("--seed", type=int, default=0, help="the scripted policy's seed")
    args = parser.parse_args(argv)
    with _experiment(args.experiment) as experiment:
        client = SandboxClient.for_experiment(experiment)
        with ThreadPoolExecutor(max_workers=4) as pool:
            groups = {
                task.task_id: [
                    pool.submit(_episode, client, task, args.seed * 1000 + i * 10 + member)
                    for member in range(args.group_size)
                ]
                for i, task in enumerate(TASKS)
            }
            for task_id, futures in groups.items():
                rewards = [future.result().reward for future in futures]
                advantages = group_advantages(rewards)
                print(
                    f"{task_id}: rewards {' '.join(f'{r:.2f}' for r in rewards)}  "
                    f"advantages {' '.join(f'{a:+.2f}' for a in advantages)}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
