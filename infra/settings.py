"""Typed deploy settings and their parsing from CDK context values (``-c name=value``).

:func:`experiment_settings` turns the raw context strings into :class:`ExperimentSettings`, raising
:class:`ContextError` with a message that names the ``-c`` flag to fix. Nothing here reads the
environment or the CDK app; ``infra/app.py`` does that once and passes the values in.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from rollout_contract.ids import InvalidIdError, validate_experiment
from rollout_contract.protocol import (
    DEFAULT_ACTIVE_SESSION_QUOTA,
    DEFAULT_IDLE_TIMEOUT_S,
    DEFAULT_INVOKE_TPS,
    DEFAULT_MAX_LIFETIME_S,
)
from rollout_contract.resources import AGENT_REPOSITORY_NAME, ExperimentKind

#: Tags left mutable in the otherwise immutable agent repository (never a default: the image is always named).
MUTABLE_IMAGE_TAGS = ("latest",)
#: Why an experiment without an image cannot be synthesized for a deploy (the repository starts empty).
MISSING_IMAGE = (
    f"missing -c image_tag=TAG: name the agent image to run, a linux/arm64 image pushed to the ECR repository "
    f"{AGENT_REPOSITORY_NAME!r} (README, 'Deploying to AWS'), e.g. -c image_tag=v1; or build one at deploy "
    "time with -c agent_dir=DIR (needs Docker). `cdk destroy -c experiment=NAME` needs neither."
)
#: ACR's bounds for both lifecycle settings, in seconds.
LIFECYCLE_MIN_S = 60
LIFECYCLE_MAX_S = 28_800
#: Lambda's bounds for an SQS event source's maximum concurrency.
MAX_CONCURRENCY_MIN = 2
MAX_CONCURRENCY_MAX = 1000
#: The id formats CloudFormation accepts for ACR's network configuration.
_AWS_ID_PATTERNS = {
    "vpc_id": re.compile(r"^vpc-[0-9a-zA-Z]{8,17}$"),
    "subnet_ids": re.compile(r"^subnet-[0-9a-zA-Z]{8,17}$"),
    "security_group_ids": re.compile(r"^sg-[0-9a-zA-Z]{8,17}$"),
}
_ENV_EXAMPLE = """'{"LOG_LEVEL": "INFO"}'"""
_EXAMPLES = {
    "vpc_id": "vpc-0abc1234def567890",
    "subnet_ids": "subnet-0abc1234def567890",
    "security_group_ids": "sg-0abc1234def567890",
}
#: Every context flag the app reads.
CONTEXT_FLAGS = (
    "experiment",
    "image_tag",
    "agent_dir",
    "idle_timeout_s",
    "max_lifetime_s",
    "agent_env",
    "vpc_id",
    "subnet_ids",
    "security_group_ids",
    "gateway_url",
    "model_id",
    "required_rollout_fields",
    "tps_limit",
    "session_budget",
    "dispatcher_max_concurrency",
    "dispatcher_reserved_concurrency",
    "first_writer_wins",
    "runtime_arn",
    "runtime_role_arn",
    "sandbox",
    "alarm_topic_arn",
)
#: Flags that configure a runtime the stack creates; an adopted runtime (``-c runtime_arn``) keeps its own.
RUNTIME_FLAGS = (
    "image_tag",
    "agent_dir",
    "idle_timeout_s",
    "max_lifetime_s",
    "agent_env",
    "vpc_id",
    "subnet_ids",
    "security_group_ids",
)
# ACR's ARN of a runtime: its id is the runtime's name, '-', ten letters or digits.
_RUNTIME_ARN = re.compile(
    r"^arn:(?P<partition>aws[a-z-]*):bedrock-agentcore:(?P<region>[a-z0-9-]+):(?P<account>\d{12}):"
    r"runtime/(?P<id>(?P<name>[A-Za-z][A-Za-z0-9_]{0,47})-[A-Za-z0-9]{10})$"
)
_ROLE_ARN = re.compile(
    r"^arn:(?P<partition>aws[a-z-]*):iam::(?P<account>\d{12}):role/(?:[\w+=,.@/-]+/)?[\w+=,.@-]{1,64}$"
)
_TOPIC_ARN = re.compile(r"^arn:aws[a-z-]*:sns:[a-z0-9-]+:\d{12}:[A-Za-z0-9_-]{1,256}(\.fifo)?$")
_FIND_ROLE = (
    "aws bedrock-agentcore-control get-agent-runtime --agent-runtime-id {id} --query roleArn --output text "
    "(or execution_role in the agentcore CLI's .bedrock_agentcore.yaml)"
)


class ContextError(ValueError):
    """A CDK context value (``-c name=value``) is missing or invalid."""


@dataclass(frozen=True, kw_only=True)
class ImageTag:
    """Run the agent image ``<shared ECR repository>:<tag>`` (pushed before the deploy)."""

    tag: str


@dataclass(frozen=True, kw_only=True)
class ImageDirectory:
    """Build the agent image from a directory holding a Dockerfile, at deploy time (needs Docker then)."""

    path: str


@dataclass(frozen=True, kw_only=True)
class VpcPlacement:
    """Run the agent sessions in existing subnets of an existing VPC, with existing security groups."""

    vpc_id: str
    subnet_ids: tuple[str, ...]
    security_group_ids: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class AdoptedRuntime:
    """An ACR runtime that exists already (the agentcore CLI's, ART's scripts'): the stack builds around it.

    The stack never changes the runtime; it attaches one statement to ``role_arn`` (the runtime's execution
    role) so the agent may write results under the experiment's prefix.
    """

    arn: str
    role_arn: str

    @property
    def runtime_id(self) -> str:
        """The id the ARN ends in (``name-xxxxxxxxxx``)."""
        return self.arn.rpartition("/")[2]

    @property
    def name(self) -> str:
        """The runtime's name (its id without the ten-character suffix)."""
        return self.runtime_id.rpartition("-")[0]

    @property
    def partition(self) -> str:
        """The runtime's partition (``aws``, ``aws-cn``, ...)."""
        return self.arn.split(":")[1]

    @property
    def region(self) -> str:
        """The runtime's region."""
        return self.arn.split(":")[3]

    @property
    def account(self) -> str:
        """The runtime's account."""
        return self.arn.split(":")[4]


@dataclass(frozen=True, kw_only=True)
class ExperimentSettings:
    """Everything that differs between two experiment stacks."""

    exp_id: str
    #: ``None`` when no image flag was given: synth and deploy then fail naming the flag (see
    #: :data:`MISSING_IMAGE`), while ``cdk destroy -c experiment=NAME`` still works.
    image: ImageTag | ImageDirectory | None
    idle_timeout_s: int = DEFAULT_IDLE_TIMEOUT_S
    max_lifetime_s: int = DEFAULT_MAX_LIFETIME_S
    agent_environment: Mapping[str, str] = field(default_factory=dict)
    vpc: VpcPlacement | None = None
    gateway_url: str | None = None
    #: The model name trainers that name none send (the descriptor's ``model_id``).
    model_id: str | None = None
    #: ``_rollout`` fields the agent needs; trainers refuse a submit without them (the descriptor's).
    required_rollout_fields: tuple[str, ...] = ()
    tps_limit: float = DEFAULT_INVOKE_TPS
    session_budget: int = int(DEFAULT_ACTIVE_SESSION_QUOTA * 0.9)
    dispatcher_max_concurrency: int = 5
    dispatcher_reserved_concurrency: int | None = None
    #: The agent's result writes must carry ``If-None-Match: *`` (IAM condition ``s3:if-none-match``); off for agent
    #: images that write without it (an unmodified ART 0.2.0 agent), at the price of a late write overwriting.
    first_writer_wins: bool = True
    #: An existing runtime to build around instead of creating one (``-c runtime_arn``); ``image`` is then None.
    adopted_runtime: AdoptedRuntime | None = None
    #: What the runtime hosts: an agent, or the sandbox daemon (``-c sandbox=true``; trainers may then start
    #: sandboxes: invoke and stop the runtime, record sandbox sessions, spend the budgets).
    kind: ExperimentKind = ExperimentKind.AGENT
    #: An SNS topic every alarm of the experiment notifies (``-c alarm_topic_arn``); ``None``: no alarm actions.
    alarm_topic_arn: str | None = None


def experiment_settings(context: Mapping[str, str | None]) -> ExperimentSettings:
    """Build :class:`ExperimentSettings` from context values (absent flags map to ``None`` or are left out).

    Raises:
        ContextError: a flag is missing or malformed; the message names the flag and an example.
    """
    exp_id = _text(context, "experiment")
    if exp_id is None:
        raise ContextError(
            "missing -c experiment=NAME: name the experiment to deploy, e.g. "
            "`npx cdk deploy -c experiment=gsm8k-grpo-1 -c image_tag=v1`"
        )
    try:
        validate_experiment(exp_id)
    except InvalidIdError as exc:
        raise ContextError(f"-c experiment: {exc}") from exc
    idle = _integer(context, "idle_timeout_s", DEFAULT_IDLE_TIMEOUT_S, LIFECYCLE_MIN_S, LIFECYCLE_MAX_S)
    lifetime = _integer(context, "max_lifetime_s", DEFAULT_MAX_LIFETIME_S, LIFECYCLE_MIN_S, LIFECYCLE_MAX_S)
    if idle > lifetime:
        raise ContextError(f"-c idle_timeout_s={idle} exceeds -c max_lifetime_s={lifetime}; lower the idle timeout")
    reserved = _text(context, "dispatcher_reserved_concurrency")
    adopted = _adopted_runtime(context)
    return ExperimentSettings(
        adopted_runtime=adopted,
        exp_id=exp_id,
        image=_image(context),
        idle_timeout_s=idle,
        max_lifetime_s=lifetime,
        agent_environment=_environment(context),
        vpc=_vpc(context),
        gateway_url=_text(context, "gateway_url"),
        model_id=_text(context, "model_id"),
        required_rollout_fields=_field_names(context, "required_rollout_fields"),
        tps_limit=_number(context, "tps_limit", float(DEFAULT_INVOKE_TPS)),
        session_budget=_integer(context, "session_budget", int(DEFAULT_ACTIVE_SESSION_QUOTA * 0.9), 1, 100_000),
        dispatcher_max_concurrency=_integer(
            context, "dispatcher_max_concurrency", 5, MAX_CONCURRENCY_MIN, MAX_CONCURRENCY_MAX
        ),
        dispatcher_reserved_concurrency=(
            None if reserved is None else _integer(context, "dispatcher_reserved_concurrency", 0, 1, 10_000)
        ),
        first_writer_wins=_boolean(context, "first_writer_wins", default=True),
        kind=ExperimentKind.SANDBOX if _boolean(context, "sandbox", default=False) else ExperimentKind.AGENT,
        alarm_topic_arn=_topic_arn(context),
    )


def _topic_arn(context: Mapping[str, str | None]) -> str | None:
    arn = _text(context, "alarm_topic_arn")
    if arn is not None and _TOPIC_ARN.match(arn) is None:
        raise ContextError(
            f"-c alarm_topic_arn={arn!r} is not an SNS topic ARN; expected e.g. "
            "arn:aws:sns:us-west-2:123456789012:rollout-alarms (`aws sns list-topics` lists yours)"
        )
    return arn


def _adopted_runtime(context: Mapping[str, str | None]) -> AdoptedRuntime | None:
    arn, role = _text(context, "runtime_arn"), _text(context, "runtime_role_arn")
    if arn is None:
        if role is not None:
            raise ContextError("-c runtime_role_arn is only for an adopted runtime: give -c runtime_arn=ARN with it")
        return None
    runtime = _RUNTIME_ARN.match(arn)
    if runtime is None:
        raise ContextError(
            f"-c runtime_arn={arn!r} is not an AgentCore runtime ARN; expected e.g. "
            "arn:aws:bedrock-agentcore:us-west-2:123456789012:runtime/my_agent-AbCdE12345 (the agentcore CLI's "
            "agent_arn; `aws bedrock-agentcore-control list-agent-runtimes` lists them)"
        )
    if role is None:
        raise ContextError(
            "-c runtime_arn needs -c runtime_role_arn=ROLE_ARN, the runtime's execution role: the stack attaches to "
            "it the one statement the agent needs to write results (s3:PutObject under the experiment's prefix of "
            f"the results bucket). Find it with: {_FIND_ROLE.format(id=runtime['id'])}"
        )
    if (matched := _ROLE_ARN.match(role)) is None:
        raise ContextError(f"-c runtime_role_arn={role!r} is not an IAM role ARN (arn:aws:iam::ACCOUNT:role/NAME)")
    if matched["account"] != runtime["account"]:
        raise ContextError(
            f"-c runtime_role_arn is in account {matched['account']}, the runtime in {runtime['account']}: give the "
            f"runtime's own execution role ({_FIND_ROLE.format(id=runtime['id'])})"
        )
    given = [f"-c {flag}" for flag in RUNTIME_FLAGS if _text(context, flag) is not None]
    if given:
        raise ContextError(
            f"{', '.join(given)} configure a runtime this stack creates; with -c runtime_arn the runtime keeps its own "
            "image, lifecycle, environment and network (change them with `aws bedrock-agentcore-control "
            "update-agent-runtime`): leave these flags out"
        )
    return AdoptedRuntime(arn=arn, role_arn=role)


def _text(context: Mapping[str, str | None], name: str) -> str | None:
    value = context.get(name)
    if value is None:
        return None
    value = str(value).strip()
    return value or None


def _field_names(context: Mapping[str, str | None], name: str) -> tuple[str, ...]:
    raw = _text(context, name)
    names = tuple(part.strip() for part in (raw or "").split(",") if part.strip())
    bad = [part for part in names if not part.isidentifier()]
    if bad:
        raise ContextError(f"-c {name}={raw!r}: {', '.join(bad)} is not a _rollout field name; e.g. model_id,base_url")
    return names


def _boolean(context: Mapping[str, str | None], name: str, *, default: bool) -> bool:
    raw = _text(context, name)
    if raw is None:
        return default
    if raw.lower() not in ("true", "false"):
        raise ContextError(f"-c {name}={raw!r} is not a boolean; give true or false")
    return raw.lower() == "true"


def _integer(context: Mapping[str, str | None], name: str, default: int, low: int, high: int) -> int:
    raw = _text(context, name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ContextError(f"-c {name}={raw!r} is not an integer; give a whole number from {low} to {high}") from None
    if not low <= value <= high:
        raise ContextError(f"-c {name}={value} is out of range; give a whole number from {low} to {high}")
    return value


def _number(context: Mapping[str, str | None], name: str, default: float) -> float:
    raw = _text(context, name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ContextError(f"-c {name}={raw!r} is not a number; give a positive number, e.g. 25") from None
    if value <= 0:
        raise ContextError(f"-c {name}={value} must be positive, e.g. 25")
    return value


def _image(context: Mapping[str, str | None]) -> ImageTag | ImageDirectory | None:
    tag, directory = _text(context, "image_tag"), _text(context, "agent_dir")
    if tag and directory:
        raise ContextError(
            "-c image_tag and -c agent_dir are both set; give one (a pushed tag, or a directory to build)"
        )
    if directory:
        return ImageDirectory(path=directory)
    return None if tag is None else ImageTag(tag=tag)


def _environment(context: Mapping[str, str | None]) -> dict[str, str]:
    raw = _text(context, "agent_env")
    if raw is None:
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ContextError(f"-c agent_env is not JSON ({exc}); give an object, e.g. {_ENV_EXAMPLE}") from exc
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ContextError(f"-c agent_env must be a JSON object of strings, e.g. {_ENV_EXAMPLE}")
    return value


def _vpc(context: Mapping[str, str | None]) -> VpcPlacement | None:
    names = ("vpc_id", "subnet_ids", "security_group_ids")
    values = {name: _text(context, name) for name in names}
    given = [name for name, value in values.items() if value]
    if not given:
        return None
    missing = [f"-c {name}=..." for name in names if name not in given]
    if missing:
        raise ContextError(
            f"VPC mode needs all of -c vpc_id, -c subnet_ids and -c security_group_ids; missing {', '.join(missing)} "
            "(lists are comma-separated: -c subnet_ids=subnet-a,subnet-b)"
        )
    ids = {name: _split(values[name]) for name in names}
    for name, parts in ids.items():
        bad = [part for part in parts if not _AWS_ID_PATTERNS[name].match(part)]
        if bad or not parts:
            raise ContextError(
                f"-c {name} has malformed ids {bad or parts}; expected ids like {_EXAMPLES[name]} (comma-separated)"
            )
    if len(ids["vpc_id"]) != 1:
        raise ContextError(f"-c vpc_id takes one VPC id, got {len(ids['vpc_id'])}")
    return VpcPlacement(
        vpc_id=ids["vpc_id"][0], subnet_ids=ids["subnet_ids"], security_group_ids=ids["security_group_ids"]
    )


def _split(raw: str | None) -> tuple[str, ...]:
    return tuple(part.strip() for part in (raw or "").split(",") if part.strip())
