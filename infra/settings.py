"""Typed deploy settings (pydantic models) and their reading from CDK context values (``-c name=value``).

:class:`ExperimentSettings` declares each flag (its field or alias is the flag's name), its default and bounds;
:func:`experiment_settings` turns the raw context strings into it, raising :class:`ContextError` with a message
that names the ``-c`` flag to fix (one translation of pydantic's errors, D82). The flags that several fields
or a structure come from (the image, the VPC, an adopted runtime) are read into their models first. Nothing here
reads the environment or the CDK app; ``infra/app.py`` does that once and passes the values in.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from rollout_contract.ids import InvalidIdError, validate_experiment
from rollout_contract.proof import UnprovenResults
from rollout_contract.protocol import (
    DEFAULT_ACTIVE_SESSION_QUOTA,
    DEFAULT_IDLE_TIMEOUT_S,
    DEFAULT_INVOKE_TPS,
    DEFAULT_MAX_LIFETIME_S,
    MAX_RUNTIME_ENDPOINTS,
)
from rollout_contract.resources import AGENT_REPOSITORY_NAME, ExperimentKind
from rollout_contract.settings import bounds_text

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
    "endpoints",
    "dispatcher_max_concurrency",
    "dispatcher_reserved_concurrency",
    "first_writer_wins",
    "unproven_results",
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
    "endpoints",
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


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


class ImageTag(_Frozen):
    """Run the agent image ``<shared ECR repository>:<tag>`` (pushed before the deploy)."""

    tag: str


class ImageDirectory(_Frozen):
    """Build the agent image from a directory holding a Dockerfile, at deploy time (needs Docker then)."""

    path: str


class VpcPlacement(_Frozen):
    """Run the agent sessions in existing subnets of an existing VPC, with existing security groups."""

    vpc_id: str
    subnet_ids: tuple[str, ...]
    security_group_ids: tuple[str, ...]


class AdoptedRuntime(_Frozen):
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


class ExperimentSettings(BaseModel):
    """Everything that differs between two experiment stacks; a field's alias (or name) is its ``-c`` flag."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    exp_id: str = Field(alias="experiment")
    #: ``None`` when no image flag was given: synth and deploy then fail naming the flag (see
    #: :data:`MISSING_IMAGE`), while ``cdk destroy -c experiment=NAME`` still works.
    image: ImageTag | ImageDirectory | None = None
    idle_timeout_s: int = Field(default=DEFAULT_IDLE_TIMEOUT_S, ge=LIFECYCLE_MIN_S, le=LIFECYCLE_MAX_S)
    max_lifetime_s: int = Field(default=DEFAULT_MAX_LIFETIME_S, ge=LIFECYCLE_MIN_S, le=LIFECYCLE_MAX_S)
    agent_environment: Mapping[str, str] = Field(default_factory=dict, alias="agent_env")
    vpc: VpcPlacement | None = None
    gateway_url: str | None = None
    #: The model name trainers that name none send (the descriptor's ``model_id``).
    model_id: str | None = None
    #: ``_rollout`` fields the agent needs; trainers refuse a submit without them (the descriptor's).
    required_rollout_fields: tuple[str, ...] = ()
    tps_limit: float = Field(default=DEFAULT_INVOKE_TPS, gt=0)
    session_budget: int = Field(default=int(DEFAULT_ACTIVE_SESSION_QUOTA * 0.9), ge=1, le=100_000)
    #: Endpoints of the runtime (``-c endpoints=K``): its own ``DEFAULT`` and K - 1 the stack creates, each with
    #: its own invoke quota (``tps_limit`` per endpoint); the dispatcher spreads invokes over them.
    endpoints: int = Field(default=1, ge=1, le=MAX_RUNTIME_ENDPOINTS)
    dispatcher_max_concurrency: int = Field(default=5, ge=MAX_CONCURRENCY_MIN, le=MAX_CONCURRENCY_MAX)
    dispatcher_reserved_concurrency: int | None = Field(default=None, ge=1, le=10_000)
    #: The agent's result writes must carry ``If-None-Match: *`` (IAM condition ``s3:if-none-match``); off for agent
    #: images that write without it (an unmodified ART 0.2.0 agent), at the price of a late write overwriting.
    first_writer_wins: bool = True
    #: What every reader does with a result that carries no proof of the rollout's agent (``-c unproven_results``,
    #: published in the descriptor; D100): ``reject`` it, or ``accept`` it marked unproven (ART's own agents sign
    #: nothing).
    unproven_results: UnprovenResults = UnprovenResults.REJECT
    #: An existing runtime to build around instead of creating one (``-c runtime_arn``); ``image`` is then None.
    adopted_runtime: AdoptedRuntime | None = None
    #: What the runtime hosts: an agent, or the sandbox daemon (``-c sandbox=true``; trainers may then start
    #: sandboxes: invoke and stop the runtime, record sandbox sessions, spend the budgets).
    kind: ExperimentKind = ExperimentKind.AGENT
    #: An SNS topic every alarm of the experiment notifies (``-c alarm_topic_arn``); ``None``: no alarm actions.
    alarm_topic_arn: str | None = None

    @field_validator("exp_id")
    @classmethod
    def _experiment(cls, exp_id: str) -> str:
        try:
            return validate_experiment(exp_id)
        except InvalidIdError as exc:
            raise ContextError(f"-c experiment: {exc}") from exc

    @field_validator("agent_environment", mode="before")
    @classmethod
    def _environment(cls, raw: Any) -> Any:
        if not isinstance(raw, str):
            return raw
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ContextError(f"-c agent_env is not JSON ({exc}); give an object, e.g. {_ENV_EXAMPLE}") from exc
        if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
            raise ContextError(f"-c agent_env must be a JSON object of strings, e.g. {_ENV_EXAMPLE}")
        return value

    @field_validator("required_rollout_fields", mode="before")
    @classmethod
    def _field_names(cls, raw: Any) -> Any:
        if not isinstance(raw, str):
            return raw
        names = _split(raw)
        bad = [part for part in names if not part.isidentifier()]
        if bad:
            raise ContextError(
                f"-c required_rollout_fields={raw!r}: {', '.join(bad)} is not a _rollout field name; "
                "e.g. model_id,base_url"
            )
        return names

    @field_validator("first_writer_wins", mode="before")
    @classmethod
    def _boolean(cls, raw: Any) -> Any:
        return _boolean(raw, "first_writer_wins")

    @field_validator("unproven_results", mode="before")
    @classmethod
    def _unproven(cls, raw: Any) -> Any:
        choices = [choice.value for choice in UnprovenResults]
        if isinstance(raw, str) and raw not in choices:
            raise ContextError(
                f"-c unproven_results={raw!r} is not one of {', '.join(choices)}; give accept for an agent that signs "
                "no result (ART's own), else leave it out"
            )
        return raw

    @field_validator("alarm_topic_arn")
    @classmethod
    def _topic_arn(cls, arn: str | None) -> str | None:
        if arn is not None and _TOPIC_ARN.match(arn) is None:
            raise ContextError(
                f"-c alarm_topic_arn={arn!r} is not an SNS topic ARN; expected e.g. "
                "arn:aws:sns:us-west-2:123456789012:rollout-alarms (`aws sns list-topics` lists yours)"
            )
        return arn

    @model_validator(mode="after")
    def _lifecycle(self) -> ExperimentSettings:
        if self.idle_timeout_s > self.max_lifetime_s:
            raise ContextError(
                f"-c idle_timeout_s={self.idle_timeout_s} exceeds -c max_lifetime_s={self.max_lifetime_s}; "
                "lower the idle timeout"
            )
        return self


def experiment_settings(context: Mapping[str, str | None]) -> ExperimentSettings:
    """Build :class:`ExperimentSettings` from context values (absent flags map to ``None`` or are left out).

    Raises:
        ContextError: a flag is missing or malformed; the message names the flag and an example.
    """
    flags = {name: text for name in CONTEXT_FLAGS if (text := _text(context, name)) is not None}
    if "experiment" not in flags:
        raise ContextError(
            "missing -c experiment=NAME: name the experiment to deploy, e.g. "
            "`npx cdk deploy -c experiment=gsm8k-grpo-1 -c image_tag=v1`"
        )
    sandbox = _boolean(flags.get("sandbox", "false"), "sandbox")
    try:
        return ExperimentSettings.model_validate(
            {
                **flags,
                # An adopted runtime first: its error names the runtime flags that must go.
                "adopted_runtime": _adopted_runtime(flags),
                "image": _image(flags),
                "vpc": _vpc(flags),
                "kind": ExperimentKind.SANDBOX if sandbox else ExperimentKind.AGENT,
            }
        )
    except ValidationError as exc:
        raise _context_error(exc) from None


def _context_error(exc: ValidationError) -> ContextError:
    """The first of pydantic's errors as a message naming the ``-c`` flag, its value and what to give."""
    error = exc.errors()[0]
    reason = error.get("ctx", {}).get("error")
    if isinstance(reason, ContextError):
        return reason
    flag, raw = str(error["loc"][0]), error["input"]
    field = ExperimentSettings.model_fields[_FIELD_OF_FLAG.get(flag, flag)]
    bounds = bounds_text(field.metadata)
    if field.annotation in (float, float | None):
        if error["type"] == "float_parsing":
            return ContextError(f"-c {flag}={raw!r} is not a number; give a {bounds} number, e.g. 25")
        return ContextError(f"-c {flag}={float(raw)} must be {bounds}, e.g. 25")
    if error["type"] == "int_parsing":
        return ContextError(f"-c {flag}={raw!r} is not an integer; give a whole number {bounds}")
    return ContextError(f"-c {flag}={int(raw)} is out of range; give a whole number {bounds}")


#: Fields whose flag is another name (their alias).
_FIELD_OF_FLAG = {
    str(info.alias): name for name, info in ExperimentSettings.model_fields.items() if info.alias is not None
}


def _boolean(raw: Any, flag: str) -> Any:
    if isinstance(raw, str):
        if raw.lower() not in ("true", "false"):
            raise ContextError(f"-c {flag}={raw!r} is not a boolean; give true or false")
        return raw.lower() == "true"
    return raw


def _adopted_runtime(flags: Mapping[str, str]) -> AdoptedRuntime | None:
    arn, role = flags.get("runtime_arn"), flags.get("runtime_role_arn")
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
    given = [f"-c {flag}" for flag in RUNTIME_FLAGS if flag in flags]
    if given:
        raise ContextError(
            f"{', '.join(given)} configure a runtime this stack creates; with -c runtime_arn the runtime keeps its own "
            "image, lifecycle, environment, network and endpoints (change them with `aws bedrock-agentcore-control "
            "update-agent-runtime`): leave these flags out"
        )
    return AdoptedRuntime(arn=arn, role_arn=role)


def _text(context: Mapping[str, str | None], name: str) -> str | None:
    value = context.get(name)
    if value is None:
        return None
    value = str(value).strip()
    return value or None


def _image(flags: Mapping[str, str]) -> ImageTag | ImageDirectory | None:
    tag, directory = flags.get("image_tag"), flags.get("agent_dir")
    if tag and directory:
        raise ContextError(
            "-c image_tag and -c agent_dir are both set; give one (a pushed tag, or a directory to build)"
        )
    if directory:
        return ImageDirectory(path=directory)
    return None if tag is None else ImageTag(tag=tag)


def _vpc(flags: Mapping[str, str]) -> VpcPlacement | None:
    names = ("vpc_id", "subnet_ids", "security_group_ids")
    given = [name for name in names if name in flags]
    if not given:
        return None
    missing = [f"-c {name}=..." for name in names if name not in given]
    if missing:
        raise ContextError(
            f"VPC mode needs all of -c vpc_id, -c subnet_ids and -c security_group_ids; missing {', '.join(missing)} "
            "(lists are comma-separated: -c subnet_ids=subnet-a,subnet-b)"
        )
    ids = {name: _split(flags[name]) for name in names}
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
