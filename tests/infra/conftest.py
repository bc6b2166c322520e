"""The CDK app synthesized once per test session, both ways ``cdk`` synthesizes it.

- ``agnostic``: no account or region (``cdk synth`` without credentials); ARNs hold pseudo parameters.
- ``bound``: account and region set, as the CDK CLI sets ``CDK_DEFAULT_ACCOUNT``/``CDK_DEFAULT_REGION``
  when it has credentials (``cdk deploy``); generated ARNs hold literal values.

Each app holds the shared stack and two experiments whose names are prefixes of each other, with cdk-nag
registered: synth raises on any unacknowledged finding.

aws_cdk and the CDK app are imported where a synth needs them: importing them starts jsii's Node process, which
the modules here that synthesize nothing (and ``make check``, which leaves the ``cdk`` tests out) do not need.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from rollout_contract.resources import SHARED_STACK_NAME

if TYPE_CHECKING:
    from aws_cdk import Environment
    from aws_cdk.assertions import Template

    from infra.experiment_stack import ExperimentStack

#: Two experiments, one name a prefix of the other (their runtimes must not share a role).
EXPERIMENTS = ("alpha", "alpha-2")
#: The experiment deployed with ``-c sandbox=true`` (its runtime hosts the sandbox daemon), so nag checks both kinds.
SANDBOX_EXPERIMENT = "alpha-2"
#: The experiment deployed with ``-c endpoints=ENDPOINTS`` (its runtime gets ENDPOINTS - 1 more endpoints).
MULTI_ENDPOINT_EXPERIMENT, ENDPOINTS = "alpha", 3
#: The SNS topic :data:`SANDBOX_EXPERIMENT`'s alarms notify (``-c alarm_topic_arn``); the other's have no actions.
ALARM_TOPIC_ARN = "arn:aws:sns:us-west-2:123456789012:rollout-alarms"
ACCOUNT = "123456789012"
REGION = "us-west-2"
MODES = ("agnostic", "bound")
#: Per-test limit for modules using the session's synth (about a minute idle; far longer on a busy machine).
SYNTH_TIMEOUT_S = 900


@dataclass(frozen=True)
class Synthesized:
    """One synthesized app: each stack's template and directory, the stack objects, the validation report."""

    mode: str
    outdir: Path
    shared: Template
    experiments: dict[str, Template]
    stacks: dict[str, ExperimentStack]
    report: dict[str, Any]

    def template_files(self) -> list[Path]:
        """Every template the app wrote."""
        return sorted(self.outdir.glob("*.template.json"))


def synthesize(outdir: Path, *, env: Environment | None, experiments: tuple[str, ...] = EXPERIMENTS) -> Synthesized:
    """Synthesize the shared stack and ``experiments`` (image tag ``v1``; :data:`SANDBOX_EXPERIMENT` with
    ``-c sandbox=true -c alarm_topic_arn=ALARM_TOPIC_ARN``, :data:`MULTI_ENDPOINT_EXPERIMENT` with ``-c endpoints``)
    with cdk-nag, into ``outdir``."""
    from aws_cdk import App
    from aws_cdk.assertions import Template

    from infra.app import build_experiment, build_shared
    from infra.nag import add_nag_checks
    from infra.settings import experiment_settings

    app = App(outdir=str(outdir))
    add_nag_checks(app)
    shared = build_shared(app, env=env)
    stacks = {
        exp_id: build_experiment(
            app,
            experiment_settings(
                {
                    "experiment": exp_id,
                    "image_tag": "v1",
                    **({"sandbox": "true", "alarm_topic_arn": ALARM_TOPIC_ARN} if exp_id == SANDBOX_EXPERIMENT else {}),
                    **({"endpoints": str(ENDPOINTS)} if exp_id == MULTI_ENDPOINT_EXPERIMENT else {}),
                }
            ),
            shared=shared,
            env=env,
        )
        for exp_id in experiments
    }
    assembly = app.synth()
    return Synthesized(
        mode="agnostic" if env is None else "bound",
        outdir=outdir,
        shared=Template.from_json(assembly.get_stack_by_name(SHARED_STACK_NAME).template),
        experiments={
            exp_id: Template.from_json(assembly.get_stack_by_name(stack.stack_name).template)
            for exp_id, stack in stacks.items()
        },
        stacks=stacks,
        report=json.loads((outdir / "validation-report.json").read_text()),
    )


@pytest.fixture(scope="session")
def synthesized(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Synthesized]:
    """The app in both synth modes, by mode."""
    from aws_cdk import Environment

    return {
        "agnostic": synthesize(tmp_path_factory.mktemp("agnostic"), env=None),
        "bound": synthesize(tmp_path_factory.mktemp("bound"), env=Environment(account=ACCOUNT, region=REGION)),
    }


@pytest.fixture
def synth(synthesized: dict[str, Synthesized]) -> Synthesized:
    """The environment-agnostic app (templates with pseudo parameters, easiest to read)."""
    return synthesized["agnostic"]
