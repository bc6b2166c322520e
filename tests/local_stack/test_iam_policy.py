"""The IAM evaluator and the request describer the e2e IAM audit (tests/e2e/test_e2e_iam.py) stands on."""

from __future__ import annotations

import json
from typing import Any

import pytest

from local_stack.aws_requests import Authorization, HttpRequest, describe
from local_stack.iam_policy import Decision, Request, UndecidableError, evaluate, statements

ROLE = "arn:aws:iam::000000000000:role/Worker"
TABLE = "arn:aws:dynamodb:us-east-1:000000000000:table/budgets"
BUCKET = "arn:aws:s3:::results"
#: The keys the tests' requests are described with (present or known to be absent).
MODELED = frozenset({"s3:if-none-match", "s3:if-match", "dynamodb:LeadingKeys", "dynamodb:ReturnValues"})
SIGNED = "AWS4-HMAC-SHA256 Credential=local-sweeper/20261127/us-east-1/{service}/aws4_request, SignedHeaders=host"


def _decide(policy: list[dict[str, Any]], action: str, resource: str, **context: tuple[str, ...]) -> Decision:
    request = Request(ROLE, action, resource, context, MODELED | frozenset(context))
    return evaluate(request, statements({"Statement": policy}, "test")).decision


def test_actions_resources_and_explicit_deny() -> None:
    # GIVEN a grant of reads on a bucket's e2e prefix (action wildcard) and a deny of one key
    policy = [
        {"Effect": "Allow", "Action": "s3:Get*", "Resource": f"{BUCKET}/e2e/*"},
        {"Effect": "Deny", "Action": "s3:GetObject", "Resource": f"{BUCKET}/e2e/secret"},
    ]
    # THEN actions match case-insensitively, resources by wildcard, the deny wins, anything else is implicit deny
    assert _decide(policy, "s3:getobject", f"{BUCKET}/e2e/a/b.json") is Decision.ALLOW
    assert _decide(policy, "s3:GetObject", f"{BUCKET}/e2e/secret") is Decision.EXPLICIT_DENY
    assert _decide(policy, "s3:GetObject", f"{BUCKET}/other/b.json") is Decision.IMPLICIT_DENY
    assert _decide(policy, "s3:PutObject", f"{BUCKET}/e2e/a/b.json") is Decision.IMPLICIT_DENY


def test_conditions_with_keys_present_absent_and_sets() -> None:
    # GIVEN the shapes the synthesized policies use: a required header, an item allow-list, an optional value
    put = [
        {
            "Effect": "Allow",
            "Action": "s3:PutObject",
            "Resource": "*",
            "Condition": {"StringEquals": {"s3:if-none-match": "*"}},
        }
    ]
    items = [
        {
            "Effect": "Allow",
            "Action": "dynamodb:UpdateItem",
            "Resource": TABLE,
            "Condition": {
                "ForAllValues:StringEquals": {"dynamodb:LeadingKeys": ["active-sessions", "tps#x"]},
                "StringEqualsIfExists": {"dynamodb:ReturnValues": "NONE"},
            },
        }
    ]
    # THEN a positive operator fails on a modeled key the request lacks
    assert _decide(put, "s3:PutObject", f"{BUCKET}/k", **{"s3:if-none-match": ("*",)}) is Decision.ALLOW
    assert _decide(put, "s3:PutObject", f"{BUCKET}/k", **{"s3:if-match": ("x",)}) is Decision.IMPLICIT_DENY
    # AND ForAllValues needs every value in the set; IfExists holds when the key is absent
    assert _decide(items, "dynamodb:UpdateItem", TABLE, **{"dynamodb:LeadingKeys": ("tps#x",)}) is Decision.ALLOW
    other = {"dynamodb:LeadingKeys": ("active-sessions", "tps#other")}
    assert _decide(items, "dynamodb:UpdateItem", TABLE, **other) is Decision.IMPLICIT_DENY
    returning = {"dynamodb:LeadingKeys": ("tps#x",), "dynamodb:ReturnValues": ("ALL_NEW",)}
    assert _decide(items, "dynamodb:UpdateItem", TABLE, **returning) is Decision.IMPLICIT_DENY


def test_what_it_cannot_decide_it_refuses() -> None:
    # GIVEN conditions on a key nobody modeled, and an operator the evaluator does not implement
    unmodeled = [
        {"Effect": "Allow", "Action": "*", "Resource": "*", "Condition": {"StringEquals": {"aws:SourceIp": "1"}}}
    ]
    numeric = [
        {"Effect": "Allow", "Action": "*", "Resource": "*", "Condition": {"NumericLessThan": {"s3:max-keys": "9"}}}
    ]
    # THEN each is an error naming what it cannot decide, never a guess
    with pytest.raises(UndecidableError, match="aws:SourceIp"):
        _decide(unmodeled, "s3:GetObject", BUCKET)
    with pytest.raises(UndecidableError, match="NumericLessThan"):
        _decide(numeric, "s3:ListBucket", BUCKET, **{"s3:max-keys": ("1",)})


def _described(method: str, path: str, service: str, query: str = "", body: Any = None, **headers: str) -> Any:
    headers = {"Authorization": SIGNED.format(service=service), **headers}
    request = HttpRequest.parse(method, path, query, headers, json.dumps(body).encode() if body else b"")
    described = describe(request, account="000000000000")
    assert described is not None and described.access_key == "local-sweeper"
    return described.operation, described.authorizations


def test_requests_are_described_as_iam_authorizes_them() -> None:
    # GIVEN signed requests whose IAM action or resources differ from their operation's name
    # THEN a HEAD is a GetObject, a list carries its prefix, a put its If-None-Match
    assert _described("HEAD", "/results/e2e/k.json", "s3") == (
        "HeadObject",
        (Authorization("s3:GetObject", (f"{BUCKET}/e2e/k.json",)),),
    )
    (listing,) = _described("GET", "/results", "s3", "list-type=2&prefix=e2e%2Fk.json")[1]
    assert (listing.action, listing.resources, listing.context) == (
        "s3:ListBucket",
        (BUCKET,),
        {"s3:prefix": ("e2e/k.json",)},
    )
    (put,) = _described("PUT", "/results/e2e/k.json", "s3", **{"If-None-Match": "*"})[1]
    assert put.context == {"s3:if-none-match": ("*",)} and "s3:if-match" in put.modeled
    # AND each item of a transaction is its own update, with its partition key and the attributes it names
    update = {
        "TableName": "budgets",
        "Key": {"budget_id": {"S": "active-sessions"}},
        "UpdateExpression": "ADD #h :one",
        "ExpressionAttributeNames": {"#h": "held_e2e"},
    }
    target = {"X-Amz-Target": "DynamoDB_20120810.TransactWriteItems"}
    _, items = _described("POST", "/", "dynamodb", body={"TransactItems": [{"Update": update}] * 2}, **target)
    assert [(a.action, a.resources) for a in items] == [("dynamodb:UpdateItem", (TABLE,))] * 2
    assert items[0].context["dynamodb:LeadingKeys"] == ("active-sessions",)
    assert items[0].context["dynamodb:Attributes"] == ("budget_id", "held_e2e")
    # AND a runtime call is authorized on the runtime and on the endpoint its qualifier names
    runtime = "arn:aws:bedrock-agentcore:us-east-1:000000000000:runtime/agent-e2e"
    operation, (invoke,) = _described("POST", f"/runtimes/{runtime}/invocations", "bedrock-agentcore")
    assert (operation, invoke.resources) == ("InvokeAgentRuntime", (runtime, f"{runtime}/runtime-endpoint/DEFAULT"))
