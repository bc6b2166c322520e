"""AWS resource names built from an experiment name, each with the longest name its service accepts.

The longest derived name decides how long an experiment name may be: :data:`EXPERIMENT_MAX_LENGTH` is computed
from :data:`EXPERIMENT_NAMES`, so adding a resource (or a longer suffix) lowers the limit instead of
breaking a deploy. Names that hold the region (they name account-wide resources) reserve
:data:`REGION_MAX_LENGTH` characters for it.
"""

from __future__ import annotations

from typing import NamedTuple

PROJECT = "agentcore-rollouts"
DLQ_SUFFIX = "-dlq"
#: Room kept for a region code in names (the longest today, e.g. ``ap-southeast-7``, has 14 characters).
REGION_MAX_LENGTH = 20


class NameRule(NamedTuple):
    """How one resource name is built from ``{experiment}`` (and ``{region}``), and its service's limit."""

    template: str
    max_length: int
    limited_by: str

    def render(self, experiment: str, region: str = "") -> str:
        """The name for ``experiment`` (in ``region``, for templates that hold one)."""
        return self.template.format(
            experiment=experiment, experiment_underscored=experiment.replace("-", "_"), region=region
        )

    @property
    def fixed_length(self) -> int:
        """Characters the name holds besides the experiment id (a region counts as its longest)."""
        return len(self.render("", region="r" * REGION_MAX_LENGTH))


_BASE = f"{PROJECT}-{{experiment}}"
_SQS = (80, "SQS queue names: 80 characters")
#: Every name derived from an experiment id. Names CloudFormation generates (functions, roles, the
#: sweep schedule) are not listed: CloudFormation fits them to their limits itself.
EXPERIMENT_NAMES: dict[str, NameRule] = {
    "dispatch_queue": NameRule(f"{_BASE}-dispatch", *_SQS),
    "dispatch_dlq": NameRule(f"{_BASE}-dispatch{DLQ_SUFFIX}", *_SQS),
    "completion_queue": NameRule(f"{_BASE}-completions", *_SQS),
    "completion_dlq": NameRule(f"{_BASE}-completions{DLQ_SUFFIX}", *_SQS),
    "finisher_queue": NameRule(f"{_BASE}-finisher", *_SQS),
    "finisher_dlq": NameRule(f"{_BASE}-finisher{DLQ_SUFFIX}", *_SQS),
    "sessions_table": NameRule(f"{_BASE}-sessions", 255, "DynamoDB table names: 255 characters"),
    "result_rule": NameRule(f"{_BASE}-results", 64, "EventBridge rule names: 64 characters"),
    "descriptor_parameter": NameRule(f"/{PROJECT}/experiments/{{experiment}}", 1011, "SSM parameter names"),
    "stack": NameRule("AgentcoreRollouts-{experiment}", 128, "CloudFormation stack names: 128 characters"),
    # Dashboards are account-wide (not regional): the region keeps two regions' dashboards apart.
    "dashboard": NameRule(f"{_BASE}-{{region}}", 255, "CloudWatch dashboard names: 255 characters"),
    # ACR: a letter, then letters, digits or underscores, 48 at most (CreateAgentRuntime's AgentRuntimeName).
    "runtime": NameRule("rollout_{experiment_underscored}", 48, "AgentCore Runtime names: 48 characters"),
}

#: The longest experiment name every name in :data:`EXPERIMENT_NAMES` accepts.
EXPERIMENT_MAX_LENGTH = min(rule.max_length - rule.fixed_length for rule in EXPERIMENT_NAMES.values())
#: The name that sets :data:`EXPERIMENT_MAX_LENGTH` (quoted in the experiment name's error).
LIMITING_NAME = min(EXPERIMENT_NAMES.values(), key=lambda rule: rule.max_length - rule.fixed_length)
