"""The CDK app: ``npx cdk deploy`` (the shared stack, once) and ``npx cdk deploy -c experiment=NAME``.

The only place that reads CDK context and the environment. Without ``-c experiment`` the app holds the
shared stack alone; with it, the experiment's stack alone, so each command deploys exactly one stack and
an experiment deploy never touches the shared resources or another experiment. The experiment stack finds
the shared resources by their contract names. Flags are validated first (a missing or bad one stops synth
with a message naming it).
"""

from __future__ import annotations

import os
import sys

from aws_cdk import App, Environment

from infra.experiment_stack import ExperimentStack
from infra.nag import add_nag_checks
from infra.settings import CONTEXT_FLAGS, ContextError, ExperimentSettings, experiment_settings
from infra.shared_stack import SharedStack
from rollout_contract.resources import SHARED_STACK_NAME, ExperimentResources


def build_shared(app: App, *, env: Environment | None = None) -> SharedStack:
    """Add the shared stack (ECR repository, results bucket, budget table)."""
    return SharedStack(app, SHARED_STACK_NAME, env=env, description="agentcore-rollouts: shared resources")


def build_experiment(
    app: App, settings: ExperimentSettings, *, shared: SharedStack | None = None, env: Environment | None = None
) -> ExperimentStack:
    """Add the stack of experiment ``settings.exp_id`` (ordered after ``shared`` when both are in one app)."""
    names = ExperimentResources.for_experiment(settings.exp_id)
    stack = ExperimentStack(
        app,
        names.stack_name,
        settings=settings,
        env=env,
        description=f"agentcore-rollouts: experiment {settings.exp_id}",
    )
    if shared is not None:
        stack.add_stack_dependency(shared, reason="uses the shared results bucket, agent repository and budget table")
    return stack


def adopted_environment(settings: ExperimentSettings, env: Environment | None) -> Environment | None:
    """The stack's environment: an adopted runtime's account and region (it can only be invoked there).

    Raises:
        ContextError: the deploying credentials are for another account or region than the adopted runtime's.
    """
    adopted = settings.adopted_runtime
    if adopted is None:
        return env
    if env is not None and (env.account, env.region) != (adopted.account, adopted.region):
        raise ContextError(
            f"-c runtime_arn is in account {adopted.account}, region {adopted.region}, but this deploy targets "
            f"{env.account}, {env.region}: deploy with the runtime's account and region (AWS_REGION={adopted.region})"
        )
    return Environment(account=adopted.account, region=adopted.region)


def main() -> None:
    """Entry point of ``cdk.json``'s ``app`` command."""
    app = App()
    account, region = os.environ.get("CDK_DEFAULT_ACCOUNT"), os.environ.get("CDK_DEFAULT_REGION")
    env = Environment(account=account, region=region) if account and region else None
    add_nag_checks(app)
    if app.node.try_get_context("experiment") is None:
        build_shared(app, env=env)
    else:
        try:
            settings = experiment_settings({flag: app.node.try_get_context(flag) for flag in CONTEXT_FLAGS})
            env = adopted_environment(settings, env)
        except ContextError as exc:
            sys.exit(f"infra/app.py: {exc}")
        build_experiment(app, settings, env=env)
    app.synth()


if __name__ == "__main__":
    main()
