"""An IAM policy evaluator for one request of a principal in the resource's own account (docs/decisions.md, D59b).

AWS's evaluation logic for that case: an explicit ``Deny`` in the identity policies or the resource's policy
wins; otherwise an ``Allow`` in either allows; otherwise the request is implicitly denied. A statement applies
when its ``Action``/``NotAction``, ``Resource``/``NotResource`` (and, in a resource policy, ``Principal``) match
and every condition holds. Actions match case-insensitively, ARNs case-sensitively, ``*`` and ``?`` as
wildcards (an ARN pattern segment by segment, as ``ArnLike`` does). Conditions: the ``String`` and ``Arn``
operators, ``Bool``, ``Null``, the ``IfExists`` suffix and the ``ForAllValues:``/``ForAnyValue:`` set
qualifiers (what the synthesized policies use), with AWS's rules for a key missing from the request: a positive
operator fails, a negated one (``...Not...``) holds, ``IfExists`` and ``ForAllValues`` hold, ``ForAnyValue``
fails.

What it cannot decide it refuses (:class:`UndecidableError`) rather than guess: any other operator (``Numeric``,
``Date``, ``IpAddress``, ...), a policy variable (``${...}``), ``NotPrincipal``, a multi-valued key without a
set qualifier, and a condition on a key the caller did not say it modeled (:attr:`Request.modeled`): a key
missing from a request is only "absent" when whoever described the request looked for it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from functools import cache
from typing import Any, NamedTuple

__all__ = ["Decision", "Evaluation", "Grant", "Request", "Statement", "UndecidableError", "evaluate", "statements"]


class UndecidableError(ValueError):
    """A policy uses something this evaluator cannot decide for the request (named in the message)."""


class Decision(Enum):
    """IAM's three outcomes."""

    ALLOW = "allow"
    EXPLICIT_DENY = "explicit deny"
    IMPLICIT_DENY = "implicit deny"


class Request(NamedTuple):
    """One authorization: ``principal`` (a role ARN) doing ``action`` on ``resource`` with this request context.

    ``context`` maps condition keys to their values (a single-valued key has one); ``modeled`` names the keys
    the describer looked for, so a modeled key missing from ``context`` is known to be absent.
    """

    principal: str
    action: str
    resource: str
    context: Mapping[str, Sequence[str]]
    modeled: frozenset[str]


class Grant(NamedTuple):
    """What an ``Allow`` statement matched a request by: the statement, its action pattern and resource pattern."""

    statement: Statement
    action: str
    resource: str


@dataclass(frozen=True)
class Statement:
    """One policy statement, its fields as lists (``source`` says which policy it came from)."""

    source: str
    effect: str
    actions: tuple[str, ...]
    not_action: bool
    resources: tuple[str, ...]
    not_resource: bool
    conditions: tuple[tuple[str, str, tuple[str, ...]], ...]
    #: ``None`` in an identity policy; in a resource policy, ``(kind, value)`` pairs (``("*", "*")`` for anyone).
    principals: tuple[tuple[str, str], ...] | None = None

    def grants(self) -> Iterable[tuple[str, str]]:
        """Every (action pattern, resource pattern) pair of an ``Allow`` statement."""
        return ((action, resource) for action in self.actions for resource in self.resources)


class Evaluation(NamedTuple):
    """The decision, and the statements that decided it (each ``Allow`` with what it matched by)."""

    decision: Decision
    allowed_by: tuple[Grant, ...]
    denied_by: tuple[Statement, ...]


def statements(document: Mapping[str, Any], source: str, *, resource_policy: bool = False) -> list[Statement]:
    """The statements of a policy document (``Statement`` a list or a single object)."""
    raw = document.get("Statement", [])
    parsed = []
    for statement in [raw] if isinstance(raw, Mapping) else raw:
        if "NotPrincipal" in statement:
            raise UndecidableError(f"{source}: NotPrincipal is not supported")
        action_field = "NotAction" if "NotAction" in statement else "Action"
        resource_field = "NotResource" if "NotResource" in statement else "Resource"
        principals = _principals(statement.get("Principal")) if resource_policy else None
        parsed.append(
            Statement(
                source=source,
                effect=statement["Effect"],
                actions=_strings(statement.get(action_field, [])),
                not_action=action_field == "NotAction",
                resources=_strings(statement.get(resource_field, ["*"])),
                not_resource=resource_field == "NotResource",
                conditions=tuple(
                    (operator, key, _strings(values))
                    for operator, block in statement.get("Condition", {}).items()
                    for key, values in block.items()
                ),
                principals=principals,
            )
        )
    return parsed


def evaluate(request: Request, identity: Sequence[Statement], resource_policy: Sequence[Statement] = ()) -> Evaluation:
    """Decide ``request`` under the principal's identity policies and the resource's policy (same account).

    Raises:
        UndecidableError: a statement that matches the action and resource has a condition this evaluator
            cannot decide for the request.
    """
    allowed: list[Grant] = []
    denied: list[Statement] = []
    for statement in [*identity, *resource_policy]:
        matched = _matched(statement, request)
        if matched is None:
            continue
        if statement.effect == "Deny":
            denied.append(statement)
        else:
            allowed.append(Grant(statement, *matched))
    decision = Decision.EXPLICIT_DENY if denied else Decision.ALLOW if allowed else Decision.IMPLICIT_DENY
    return Evaluation(decision, tuple(allowed), tuple(denied))


def _matched(statement: Statement, request: Request) -> tuple[str, str] | None:
    """The (action, resource) patterns by which ``statement`` applies to ``request``, or ``None``."""
    if statement.principals is not None and not _principal_matches(statement.principals, request.principal):
        return None
    action = _first(statement.actions, lambda pattern: _glob(pattern, case=False).fullmatch(request.action))
    if (action is None) != statement.not_action:
        return None
    resource = _first(statement.resources, lambda pattern: _resource_matches(pattern, request.resource))
    if (resource is None) != statement.not_resource:
        return None
    if not all(_condition(operator, key, values, request) for operator, key, values in statement.conditions):
        return None
    return action or f"NotAction {list(statement.actions)}", resource or f"NotResource {list(statement.resources)}"


def _first(patterns: Iterable[str], matches: Callable[[str], object]) -> str | None:
    return next((pattern for pattern in patterns if matches(pattern)), None)


def _strings(value: Any) -> tuple[str, ...]:
    values = value if isinstance(value, list | tuple) else [value]
    return tuple(str(v).lower() if isinstance(v, bool) else str(v) for v in values)


def _principals(value: Any) -> tuple[tuple[str, str], ...]:
    if value == "*":
        return (("*", "*"),)
    return tuple((kind, principal) for kind, principals in value.items() for principal in _strings(principals))


def _principal_matches(principals: Sequence[tuple[str, str]], principal: str) -> bool:
    account = principal.split(":")[4] if principal.startswith("arn:") else ""
    for kind, value in principals:
        if kind == "*" or (kind == "AWS" and value in ("*", principal, account, f"arn:aws:iam::{account}:root")):
            return True
    return False


@cache
def _glob(pattern: str, *, case: bool = True) -> re.Pattern[str]:
    """IAM's wildcards: ``*`` any run of characters, ``?`` one character, everything else literal."""
    _refuse_variables(pattern)
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.compile(regex, re.DOTALL | (0 if case else re.IGNORECASE))


def _refuse_variables(value: str) -> None:
    if "${" in value:
        raise UndecidableError(f"policy variables are not supported ({value!r})")


def _resource_matches(pattern: str, resource: str) -> bool:
    if pattern.startswith("arn:") and pattern.count(":") >= 5:
        return _arn_like(pattern, resource)
    return bool(_glob(pattern).fullmatch(resource))


def _arn_like(pattern: str, arn: str) -> bool:
    """ARN matching segment by segment (the sixth segment is the rest, colons included)."""
    wanted, actual = pattern.split(":", 5), arn.split(":", 5)
    if len(wanted) != 6 or len(actual) != 6:
        return False
    return all(_glob(w).fullmatch(a) for w, a in zip(wanted, actual, strict=True))


# Conditions ------------------------------------------------------------------------------------------------------


#: Each positive operator: does a request value match a policy value.
_MATCHERS: dict[str, Callable[[str, str], bool]] = {
    "StringEquals": lambda value, wanted: value == wanted,
    "StringEqualsIgnoreCase": lambda value, wanted: value.lower() == wanted.lower(),
    "StringLike": lambda value, wanted: bool(_glob(wanted).fullmatch(value)),
    "Bool": lambda value, wanted: value.lower() == wanted.lower(),
    # ArnEquals and ArnLike are the same test: segment by segment, wildcards allowed.
    "ArnEquals": lambda value, wanted: _arn_like(wanted, value),
    "ArnLike": lambda value, wanted: _arn_like(wanted, value),
}
#: Each negated operator and the positive one it negates.
_NEGATED = {
    "StringNotEquals": "StringEquals",
    "StringNotEqualsIgnoreCase": "StringEqualsIgnoreCase",
    "StringNotLike": "StringLike",
    "ArnNotEquals": "ArnEquals",
    "ArnNotLike": "ArnLike",
}
_QUALIFIERS = ("ForAllValues:", "ForAnyValue:")


def _condition(operator: str, key: str, wanted: Sequence[str], request: Request) -> bool:
    """Whether condition ``operator`` on ``key`` with the policy's values ``wanted`` holds for ``request``."""
    qualifier = next((q for q in _QUALIFIERS if operator.startswith(q)), "")
    base = operator.removeprefix(qualifier)
    if_exists = base.endswith("IfExists") and base != "IfExists"
    base = base.removesuffix("IfExists") if if_exists else base
    negated = base in _NEGATED
    matcher = _MATCHERS.get(_NEGATED.get(base, base))
    if matcher is None and base != "Null":
        raise UndecidableError(f"condition operator {operator!r} is not supported")
    values = _context_values(key, request)
    if base == "Null":
        return all((w.lower() == "true") == (values is None) for w in wanted)
    assert matcher is not None
    for value in wanted:
        _refuse_variables(value)

    def holds(value: str) -> bool:
        hit = any(matcher(value, w) for w in wanted)
        return not hit if negated else hit

    if values is None or (qualifier and not values):
        if qualifier:
            return qualifier == "ForAllValues:"
        return if_exists or negated
    if qualifier == "ForAllValues:":
        return all(holds(v) for v in values)
    if qualifier == "ForAnyValue:":
        return any(holds(v) for v in values)
    if len(values) != 1:
        raise UndecidableError(f"{key} has {len(values)} values in this request: {operator} needs a set qualifier")
    return holds(values[0])


def _context_values(key: str, request: Request) -> Sequence[str] | None:
    """The request's values of ``key`` (condition keys are case-insensitive), ``None`` when it is absent."""
    wanted = key.lower()
    for name, values in request.context.items():
        if name.lower() == wanted:
            return values
    if not any(name.lower() == wanted for name in request.modeled):
        raise UndecidableError(
            f"a condition on {key} for {request.action}: whoever described the request did not model that key"
        )
    return None
