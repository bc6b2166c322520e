"""The CDK app synthesized for the local stack's account and region, in a process of its own.

``python iam_support.py OUTDIR EXPERIMENT [sandbox]`` writes ``shared.json`` and ``experiment.json`` (the two
templates; ``sandbox``: the experiment deployed with ``-c sandbox=true``) and ``roles.json`` (each component's
role, by logical id) into OUTDIR. A test starts it first (:func:`start_synth`) and reads it last
(:func:`synthesized`), so the synth runs while the stack does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parents[2]
SYNTH_TIMEOUT_S = 600


def start_synth(outdir: Path, experiment: str, *, sandbox: bool = False) -> subprocess.Popen[str]:
    """Start synthesizing the shared stack and ``experiment``'s (a sandbox experiment's) into ``outdir``."""
    outdir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PROJECT_ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen(
        [sys.executable, __file__, str(outdir), experiment, *(["sandbox"] if sandbox else [])],
        cwd=PROJECT_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def synthesized(process: subprocess.Popen[str], outdir: Path) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The templates and the component -> role logical id map of a finished :func:`start_synth`."""
    output, _ = process.communicate(timeout=SYNTH_TIMEOUT_S)
    if process.returncode != 0:
        raise RuntimeError(f"synth failed ({process.returncode}):\n{output[-4000:]}")
    templates = [json.loads((outdir / f"{name}.json").read_text()) for name in ("shared", "experiment")]
    return templates, json.loads((outdir / "roles.json").read_text())


def _synthesize(outdir: Path, experiment: str, *, sandbox: bool) -> None:
    from aws_cdk import App, Environment

    from infra.app import build_experiment, build_shared
    from infra.settings import experiment_settings
    from local_stack.moto_server import LOCAL_ACCOUNT_ID, LOCAL_REGION
    from rollout_contract.resources import SHARED_STACK_NAME

    app = App(outdir=str(outdir / "cdk.out"))
    env = Environment(account=LOCAL_ACCOUNT_ID, region=LOCAL_REGION)
    shared = build_shared(app, env=env)
    settings = experiment_settings(
        {"experiment": experiment, "image_tag": "v1", **({"sandbox": "true"} if sandbox else {})}
    )
    stack = build_experiment(app, settings, shared=shared, env=env)
    assembly = app.synth()
    for name, stack_name in (("shared", SHARED_STACK_NAME), ("experiment", stack.stack_name)):
        (outdir / f"{name}.json").write_text(json.dumps(assembly.get_stack_by_name(stack_name).template))
    roles = {name: worker.role for name, worker in stack.workers.all.items()}
    roles.update(trainer=stack.trainer.role, agent=stack.agent.execution_role)
    logical_ids = {name: stack.get_logical_id(role.node.default_child) for name, role in roles.items()}
    (outdir / "roles.json").write_text(json.dumps(logical_ids))


if __name__ == "__main__":
    _synthesize(Path(sys.argv[1]), sys.argv[2], sandbox=sys.argv[3:] == ["sandbox"])
