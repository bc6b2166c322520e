"""The policies CDK synthesizes, resolved against the local stack's names, and an audit of recorded calls by them.

:class:`DeployedPolicies` reads synthesized templates (``app.synth()``'s stacks, bound to an account and region):
each role's identity policies (``AWS::IAM::Policy`` resources naming the role, and the role's inline policies)
and the resource policies of buckets and queues. CloudFormation intrinsics (``Ref``, ``Fn::GetAtt``,
``Fn::Join``, ``Fn::Sub``, ``Fn::Select``, pseudo parameters) resolve to what the local stack names: the same
``rollout_contract.resources`` names CDK uses (queues, tables, rule, parameter), the local runtime's ARN, and the
literal renames the caller gives (the deployed bucket's name is the local one's).

:func:`audit` evaluates every recorded call of a component (:mod:`local_stack.call_log`) with
:mod:`local_stack.iam_policy` against its role and the resource's policy, as AWS would over TLS, and collects
both directions: calls not allowed, and grants (statement, action, resource) no allowed call used.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from local_stack.aws_requests import Authorization, secret_arn
from local_stack.call_log import RecordedCall
from local_stack.iam_policy import Decision, Grant, Request, Statement, UndecidableError, evaluate, statements

__all__ = ["Audit", "DeployedPolicies", "Finding", "UnresolvedError", "audit"]

_SUB_VARIABLE = re.compile(r"\$\{([^}!][^}]*)\}")


class UnresolvedError(ValueError):
    """A template value refers to something the local stack has no value for (named in the message)."""


class _Resolver:
    """Resolves CloudFormation intrinsics to local values."""

    def __init__(
        self, attributes: Mapping[str, Mapping[str, str]], pseudo: Mapping[str, str], renames: Mapping[str, str]
    ):
        self._attributes = attributes
        self._pseudo = pseudo
        self._renames = renames

    def __call__(self, value: Any) -> Any:
        if isinstance(value, str):
            for deployed, local in self._renames.items():
                value = value.replace(deployed, local)
            return value
        if isinstance(value, list):
            return [self(item) for item in value]
        if not isinstance(value, Mapping):
            return value
        if len(value) == 1:
            ((name, argument),) = value.items()
            if name == "Ref":
                return self(self._pseudo[argument]) if argument in self._pseudo else self._attribute(argument, "Ref")
            if name == "Fn::GetAtt":
                logical_id, attribute = argument if isinstance(argument, list) else argument.split(".", 1)
                return self._attribute(logical_id, attribute)
            if name == "Fn::Join":
                delimiter, parts = argument
                return self(str(delimiter).join(str(self(part)) for part in parts))
            if name == "Fn::Select":
                index, items = argument
                return self(self(items)[int(self(index))])
            if name == "Fn::Sub":
                template, variables = (argument, {}) if isinstance(argument, str) else argument
                return self(_SUB_VARIABLE.sub(lambda m: str(self._variable(m[1], variables)), template))
            if name.startswith("Fn::"):
                raise UnresolvedError(f"intrinsic {name} is not supported")
        return {key: self(item) for key, item in value.items()}

    def _variable(self, name: str, variables: Mapping[str, Any]) -> Any:
        if name in variables:
            return self(variables[name])
        if name in self._pseudo:
            return self._pseudo[name]
        logical_id, _, attribute = name.partition(".")
        return self._attribute(logical_id, attribute or "Ref")

    def _attribute(self, logical_id: str, attribute: str) -> str:
        try:
            value: str = self(self._attributes[logical_id][attribute])
            return value
        except KeyError:
            raise UnresolvedError(f"no local value for {logical_id}.{attribute}") from None


def _local_attributes(
    logical_id: str, resource: Mapping[str, Any], *, region: str, account: str, runtime_arn: str
) -> dict[str, Any]:
    """The ``Ref`` and attributes of one template resource, as the local stack names it."""
    kind, properties = resource["Type"], resource.get("Properties", {})

    def arn(service: str, name: str) -> str:
        return f"arn:aws:{service}:{region}:{account}:{name}"

    if kind == "AWS::SQS::Queue" and "QueueName" in properties:
        name = properties["QueueName"]
        return {
            "Ref": f"https://sqs.{region}.amazonaws.com/{account}/{name}",
            "Arn": arn("sqs", name),
            "QueueName": name,
        }
    if kind == "AWS::DynamoDB::Table" and "TableName" in properties:
        return {"Ref": properties["TableName"], "Arn": arn("dynamodb", f"table/{properties['TableName']}")}
    if kind == "AWS::SSM::Parameter" and "Name" in properties:
        return {"Ref": properties["Name"]}
    if kind == "AWS::Events::Rule" and "Name" in properties:
        return {"Ref": properties["Name"], "Arn": arn("events", f"rule/{properties['Name']}")}
    if kind == "AWS::S3::Bucket":
        name = properties.get("BucketName", logical_id.lower())
        return {"Ref": name, "Arn": f"arn:aws:s3:::{name}"}
    if kind == "AWS::BedrockAgentCore::Runtime":
        return {"AgentRuntimeArn": runtime_arn, "AgentRuntimeId": runtime_arn.rpartition("/")[2]}
    if kind == "AWS::IAM::Role":
        return {"Ref": logical_id, "Arn": f"arn:aws:iam::{account}:role/{logical_id}"}
    if kind == "AWS::SecretsManager::Secret" and "Name" in properties:
        return {"Ref": secret_arn(region, account, properties["Name"])}
    if kind == "AWS::Logs::LogGroup":
        return {"Ref": logical_id, "Arn": arn("logs", f"log-group:{properties.get('LogGroupName', logical_id)}:*")}
    return {}


@dataclass
class DeployedPolicies:
    """Each role's identity statements and each bucket's and queue's resource statements, resolved locally."""

    roles: dict[str, tuple[str, list[Statement]]] = field(default_factory=dict)
    resource_policies: list[tuple[str, list[Statement]]] = field(default_factory=list)
    #: Roles with managed policies (whose documents are not in the templates), and their ARNs.
    managed: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def from_templates(
        cls,
        templates: Sequence[Mapping[str, Any]],
        *,
        region: str,
        account: str,
        runtime_arn: str,
        renames: Mapping[str, str] = {},
    ) -> DeployedPolicies:
        """Read ``templates`` (every stack that may hold a policy or a resource one refers to).

        Raises:
            UnresolvedError: a policy refers to something without a local value, or uses an unsupported intrinsic.
        """
        resources = {logical_id: r for template in templates for logical_id, r in template["Resources"].items()}
        attributes = {
            logical_id: _local_attributes(logical_id, r, region=region, account=account, runtime_arn=runtime_arn)
            for logical_id, r in resources.items()
        }
        pseudo = {
            "AWS::Partition": "aws",
            "AWS::Region": region,
            "AWS::AccountId": account,
            "AWS::URLSuffix": "amazonaws.com",
        }
        resolve = _Resolver(attributes, pseudo, renames)
        policies = cls()
        for logical_id, resource in resources.items():
            properties = resource.get("Properties", {})
            if resource["Type"] == "AWS::IAM::Role":
                inline = [
                    s
                    for policy in properties.get("Policies", [])
                    for s in statements(resolve(policy["PolicyDocument"]), f"{logical_id}/{policy['PolicyName']}")
                ]
                policies._statements_of(logical_id, attributes).extend(inline)
                if properties.get("ManagedPolicyArns"):
                    policies.managed[logical_id] = resolve(properties["ManagedPolicyArns"])
            elif resource["Type"] == "AWS::IAM::Policy":
                document = statements(resolve(properties["PolicyDocument"]), logical_id)
                for role in properties.get("Roles", []):
                    policies._statements_of(role["Ref"], attributes).extend(document)
            elif resource["Type"] == "AWS::S3::BucketPolicy":
                bucket = f"arn:aws:s3:::{resolve(properties['Bucket'])}"
                document = statements(resolve(properties["PolicyDocument"]), logical_id, resource_policy=True)
                policies.resource_policies += [(bucket, document), (f"{bucket}/", document)]
            elif resource["Type"] == "AWS::SQS::QueuePolicy":
                document = statements(resolve(properties["PolicyDocument"]), logical_id, resource_policy=True)
                policies.resource_policies += [(attributes[q["Ref"]]["Arn"], document) for q in properties["Queues"]]
        return policies

    def _statements_of(self, role: str, attributes: Mapping[str, Mapping[str, str]]) -> list[Statement]:
        return self.roles.setdefault(role, (attributes[role]["Arn"], []))[1]

    def for_resource(self, resource: str) -> list[Statement]:
        """The resource policy statements that govern ``resource`` (a bucket's govern its objects too)."""
        return [
            statement
            for governed, document in self.resource_policies
            if resource == governed or (governed.endswith("/") and resource.startswith(governed))
            for statement in document
        ]


@dataclass(frozen=True)
class Finding:
    """A recorded call that is not allowed (or cannot be decided), with why."""

    component: str
    operation: str
    authorization: Authorization
    resource: str
    why: str


@dataclass
class Audit:
    """Both directions of an audit: calls not allowed, grants not used; and how many calls each component made."""

    calls: dict[str, int] = field(default_factory=dict)
    not_allowed: list[Finding] = field(default_factory=list)
    granted: dict[str, list[Grant]] = field(default_factory=dict)
    unused: dict[str, list[Grant]] = field(default_factory=dict)

    def summary(self) -> str:
        """Per component: calls, and the actions (and action-resource grants) its role has and its calls used."""
        lines = []
        for component, granted in self.granted.items():
            unused = self.unused[component]
            actions = {g.action for g in granted}
            used = {g.action for g in granted if g not in unused}
            lines.append(
                f"{component}: {self.calls[component]} calls, {len(used)}/{len(actions)} granted actions used "
                f"({len(granted) - len(unused)}/{len(granted)} action-resource grants)"
            )
        return "\n".join(lines)


def audit(
    calls: Iterable[RecordedCall],
    policies: DeployedPolicies,
    roles: Mapping[str, str],
    *,
    region: str,
    account: str,
) -> Audit:
    """Evaluate the calls of every component in ``roles`` (component -> role logical id) against its policies.

    Each call is evaluated as AWS would over TLS (``aws:SecureTransport`` true) for the role's principal.
    A grant is each (action, resource) pair of each ``Allow`` statement of the role; it is used when it allowed
    some recorded call.

    Raises:
        UndecidableError: a component's role has managed policies (their documents are not in the templates).
    """
    for component, role in roles.items():
        if role in policies.managed:
            raise UndecidableError(f"{component}'s role {role} has managed policies {policies.managed[role]}")
    result = Audit(calls=dict.fromkeys(roles, 0))
    used: set[Grant] = set()
    for call in calls:
        if call.component not in roles:
            continue
        result.calls[call.component] += 1
        role_arn, identity = policies.roles[roles[call.component]]
        for authorization in call.authorizations:
            if not authorization.action:
                result.not_allowed.append(Finding(call.component, call.operation, authorization, "", "unmapped"))
                continue
            for resource in authorization.resources:
                request = Request(
                    principal=role_arn,
                    action=authorization.action,
                    resource=resource,
                    context={
                        **authorization.context,
                        "aws:SecureTransport": ("true",),
                        "aws:PrincipalArn": (role_arn,),
                        "aws:PrincipalAccount": (account,),
                        "aws:RequestedRegion": (region,),
                    },
                    modeled=authorization.modeled
                    | {"aws:SecureTransport", "aws:PrincipalArn", "aws:PrincipalAccount", "aws:RequestedRegion"},
                )
                try:
                    evaluation = evaluate(request, identity, policies.for_resource(resource))
                except UndecidableError as exc:
                    result.not_allowed.append(
                        Finding(call.component, call.operation, authorization, resource, str(exc))
                    )
                    continue
                if evaluation.decision is not Decision.ALLOW:
                    why = evaluation.decision.value + "".join(f" by {s.source}" for s in evaluation.denied_by)
                    result.not_allowed.append(Finding(call.component, call.operation, authorization, resource, why))
                    continue
                used.update(evaluation.allowed_by)
    for component, role in roles.items():
        granted = [Grant(s, a, r) for s in policies.roles[role][1] if s.effect == "Allow" for a, r in s.grants()]
        result.granted[component] = granted
        result.unused[component] = [grant for grant in granted if grant not in used]
    return result
