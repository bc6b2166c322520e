"""What IAM authorizes for one AWS request: its actions, resource ARNs and the condition keys in play.

The local stack's recorder (:mod:`local_stack.call_log`) hands every signed request that reaches the moto server
or the ACR emulator to :func:`describe`, so a test can check each call against the policy CDK synthesizes for the
caller's role (:mod:`local_stack.iam_policy`). The rules are AWS's (Service Authorization Reference): a
``HeadObject`` is authorized as ``s3:GetObject``, ``ListObjectsV2`` as ``s3:ListBucket`` with ``s3:prefix``, a
``DeleteMessageBatch`` as ``sqs:DeleteMessage``, each item of a ``TransactWriteItems`` as its own
``dynamodb:UpdateItem`` (or put, delete, condition check), ``InvokeAgentRuntime`` on the runtime and the endpoint
its qualifier names.

Each :class:`Authorization` says which condition keys it *modeled*: a key in ``modeled`` but not in ``context``
is known to be absent from the request. A policy condition on a key that is not modeled cannot be decided here,
and the evaluator says so instead of guessing. ``dynamodb:Attributes`` is the superset AWS could see: every
attribute the request names (key, update and condition expressions, projection), so an attribute allow-list
that admits it admits AWS's set too; a read without a projection names every attribute (``*``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple
from urllib.parse import parse_qs, unquote

from rollout_contract.protocol import DEFAULT_QUALIFIER
from rollout_contract.resources import BUDGET_PARTITION_KEY, SESSIONS_PARTITION_KEY

__all__ = ["Authorization", "Described", "HttpRequest", "describe", "secret_arn", "signer"]

#: IAM's service prefix per SigV4 signing name, where they differ.
_IAM_PREFIX = {"monitoring": "cloudwatch"}
#: Operations IAM authorizes under another action's name.
_ACTION_OF = {
    "sqs:DeleteMessageBatch": "sqs:DeleteMessage",
    "sqs:ChangeMessageVisibilityBatch": "sqs:ChangeMessageVisibility",
    "sqs:SendMessageBatch": "sqs:SendMessage",
}
#: The partition keys of the contract's tables (every table here has a partition key and no sort key).
_PARTITION_KEYS = (SESSIONS_PARTITION_KEY, BUDGET_PARTITION_KEY)
_TRANSACT_ACTIONS = {
    "Update": "UpdateItem",
    "Put": "PutItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
}
_ITEM_KEYS = frozenset(
    {"dynamodb:LeadingKeys", "dynamodb:Attributes", "dynamodb:ReturnValues", "dynamodb:EnclosingOperation"}
)
_CREDENTIAL = re.compile(r"Credential=([^/,\s]+)/[^/]+/([^/]+)/([^/]+)/aws4_request")
_RUNTIME_CALL = re.compile(r"^/runtimes/(arn:.+)/(invocations|stopruntimesession)$")
_CONTROL_RUNTIME = re.compile(r"^/runtimes/([^/]+)/?$")
_EXPRESSION_TOKEN = re.compile(r"[#:]?[A-Za-z_][A-Za-z0-9_]*|\.|\[")
_EXPRESSION_WORDS = frozenset({"set", "remove", "add", "delete", "and", "or", "not", "between", "in"})


class HttpRequest(NamedTuple):
    """One HTTP request as a server saw it: the path decoded, header names in lower case."""

    method: str
    path: str
    query: Mapping[str, Sequence[str]]
    headers: Mapping[str, str]
    body: bytes = b""

    @classmethod
    def parse(
        cls, method: str, path: str, query_string: str, headers: Mapping[str, str], body: bytes = b""
    ) -> HttpRequest:
        """Build from raw parts (``path`` already decoded, as WSGI's ``PATH_INFO`` and ASGI's ``path`` are)."""
        query = parse_qs(query_string, keep_blank_values=True)
        return cls(method.upper(), path, query, {name.lower(): value for name, value in headers.items()}, body)


class Authorization(NamedTuple):
    """One IAM decision a request needs: ``action`` on every ARN of ``resources``, with this request context."""

    action: str
    resources: tuple[str, ...]
    context: Mapping[str, tuple[str, ...]] = {}
    modeled: frozenset[str] = frozenset()


class Described(NamedTuple):
    """A request as IAM sees it: who signed it, which operation, what it must be allowed to do."""

    access_key: str
    service: str
    operation: str
    authorizations: tuple[Authorization, ...]


def signer(request: HttpRequest) -> tuple[str, str, str] | None:
    """``(access key, region, signing service)`` of a SigV4-signed request (header or presigned URL), else ``None``."""
    authorization = request.headers.get("authorization", "")
    match = _CREDENTIAL.search(authorization)
    if match is None and "X-Amz-Credential" in request.query:
        match = _CREDENTIAL.search(f"Credential={request.query['X-Amz-Credential'][0]}")
    return (match[1], match[2], match[3]) if match else None


def describe(request: HttpRequest, *, account: str) -> Described | None:
    """What IAM authorizes for ``request`` made in ``account``; ``None`` for a request that is not signed.

    An operation this module has no rule for gets one authorization named after it with no resource, so the
    evaluator reports it rather than passing it.
    """
    signed = signer(request)
    if signed is None:
        return None
    access_key, region, service = signed
    arns = _Arns(region, account)
    if service == "s3":
        operation, authorizations = _s3(request, arns)
    elif service == "bedrock-agentcore":
        operation, authorizations = _agentcore(request, arns)
    else:
        operation, params = _operation(request)
        prefix = _IAM_PREFIX.get(service, service)
        action = _ACTION_OF.get(f"{prefix}:{operation}", f"{prefix}:{operation}")
        rules = {
            "sqs": _sqs,
            "dynamodb": _dynamodb,
            "events": _events,
            "ssm": _ssm,
            "cloudwatch": _cloudwatch,
            "secretsmanager": _secretsmanager,
        }
        rule = rules.get(prefix)
        authorizations = rule(action, params, arns) if rule else [Authorization(action, ("*",))]
    return Described(access_key, service, operation, tuple(authorizations))


class _Arns(NamedTuple):
    region: str
    account: str

    def of(self, service: str, resource: str, *, regional: bool = True) -> str:
        return f"arn:aws:{service}:{self.region if regional else ''}:{self.account if regional else ''}:{resource}"


def _operation(request: HttpRequest) -> tuple[str, dict[str, Any]]:
    """The operation and parameters of a JSON-protocol (``X-Amz-Target``) or query-protocol request."""
    target = request.headers.get("x-amz-target")
    if target:
        params = json.loads(request.body) if request.body else {}
        return target.rpartition(".")[2], params if isinstance(params, dict) else {}
    form = parse_qs(request.body.decode(errors="replace")) if request.body else dict(request.query)
    params = {name: values[0] for name, values in form.items()}
    return str(params.pop("Action", "Unknown")), params


# S3 (path-style requests, as boto3 sends them to 127.0.0.1) ---------------------------------------------------

_S3_OBJECT = {
    ("GET", ""): ("GetObject", "s3:GetObject"),
    ("HEAD", ""): ("HeadObject", "s3:GetObject"),
    ("PUT", ""): ("PutObject", "s3:PutObject"),
    ("DELETE", ""): ("DeleteObject", "s3:DeleteObject"),
    ("GET", "tagging"): ("GetObjectTagging", "s3:GetObjectTagging"),
    ("PUT", "tagging"): ("PutObjectTagging", "s3:PutObjectTagging"),
}
_S3_BUCKET = {
    ("GET", ""): ("ListObjects", "s3:ListBucket"),
    ("HEAD", ""): ("HeadBucket", "s3:ListBucket"),
    ("GET", "notification"): ("GetBucketNotificationConfiguration", "s3:GetBucketNotification"),
    ("PUT", "notification"): ("PutBucketNotificationConfiguration", "s3:PutBucketNotification"),
    ("GET", "versioning"): ("GetBucketVersioning", "s3:GetBucketVersioning"),
    ("PUT", "versioning"): ("PutBucketVersioning", "s3:PutBucketVersioning"),
    ("GET", "location"): ("GetBucketLocation", "s3:GetBucketLocation"),
    ("PUT", ""): ("CreateBucket", "s3:CreateBucket"),
    ("DELETE", ""): ("DeleteBucket", "s3:DeleteBucket"),
}
#: Query parameters that name an S3 sub-resource (the others are options of the operation).
_S3_SUBRESOURCES = ("tagging", "notification", "versioning", "location", "uploads", "uploadId", "acl", "policy")
_LIST_KEYS = {"prefix": "s3:prefix", "delimiter": "s3:delimiter", "max-keys": "s3:max-keys"}
_CONDITIONAL_WRITE_KEYS = {"if-none-match": "s3:if-none-match", "if-match": "s3:if-match"}


def _s3(request: HttpRequest, arns: _Arns) -> tuple[str, list[Authorization]]:
    bucket, _, key = request.path.lstrip("/").partition("/")
    subresource = next((name for name in _S3_SUBRESOURCES if name in request.query), "")
    if not bucket:
        return "ListBuckets", [Authorization("s3:ListAllMyBuckets", ("*",))]
    bucket_arn = f"arn:aws:s3:::{bucket}"
    if key:
        if request.method == "PUT" and "x-amz-copy-source" in request.headers:
            source = unquote(request.headers["x-amz-copy-source"]).lstrip("/").partition("?")[0]
            return "CopyObject", [
                _put(f"{bucket_arn}/{key}", request.headers),
                Authorization("s3:GetObject", (f"arn:aws:s3:::{source}",)),
            ]
        operation, action = _S3_OBJECT.get((request.method, subresource), _unknown("S3", request, subresource))
        if action == "s3:PutObject":
            return operation, [_put(f"{bucket_arn}/{key}", request.headers)]
        return operation, [Authorization(action, (f"{bucket_arn}/{key}",))]
    operation, action = _S3_BUCKET.get((request.method, subresource), _unknown("S3", request, subresource))
    if operation == "ListObjects":
        operation = "ListObjectsV2" if request.query.get("list-type") == ["2"] else operation
        context = {key: (request.query[name][0],) for name, key in _LIST_KEYS.items() if name in request.query}
        return operation, [Authorization(action, (bucket_arn,), context, frozenset(_LIST_KEYS.values()))]
    return operation, [Authorization(action, (bucket_arn,))]


def _put(object_arn: str, headers: Mapping[str, str]) -> Authorization:
    context = {key: (headers[name],) for name, key in _CONDITIONAL_WRITE_KEYS.items() if name in headers}
    return Authorization("s3:PutObject", (object_arn,), context, frozenset(_CONDITIONAL_WRITE_KEYS.values()))


def _unknown(service: str, request: HttpRequest, subresource: str) -> tuple[str, str]:
    what = f"{request.method} {'?' + subresource if subresource else request.path}"
    return f"unmapped {service} request {what}", ""


# JSON-protocol services ----------------------------------------------------------------------------------------


def _sqs(action: str, params: Mapping[str, Any], arns: _Arns) -> list[Authorization]:
    if "QueueUrl" in params:
        account, name = str(params["QueueUrl"]).rstrip("/").rsplit("/", 2)[-2:]
        return [Authorization(action, (f"arn:aws:sqs:{arns.region}:{account}:{name}",))]
    if "QueueName" in params:
        account = str(params.get("QueueOwnerAWSAccountId", arns.account))
        return [Authorization(action, (f"arn:aws:sqs:{arns.region}:{account}:{params['QueueName']}",))]
    return [Authorization(action, ("*",))]


def _events(action: str, params: Mapping[str, Any], arns: _Arns) -> list[Authorization]:
    name = params.get("Name") or params.get("Rule")
    if name is None:
        return [Authorization(action, ("*",))]
    bus = params.get("EventBusName", "default")
    return [Authorization(action, (arns.of("events", f"rule/{name}" if bus == "default" else f"rule/{bus}/{name}"),))]


def _ssm(action: str, params: Mapping[str, Any], arns: _Arns) -> list[Authorization]:
    names = params.get("Names") or ([params["Name"]] if "Name" in params else [])
    if not names:
        return [Authorization(action, ("*",))]
    return [Authorization(action, tuple(arns.of("ssm", f"parameter/{str(name).lstrip('/')}") for name in names))]


def secret_arn(region: str, account: str, name: str) -> str:
    """A secret's ARN as the local twin writes it: AWS ends it in six random characters, which a request naming the
    secret does not carry, so ``??????`` stands for them (a policy's ARN of the secret resolves the same way)."""
    return f"arn:aws:secretsmanager:{region}:{account}:secret:{name}-??????"


def _secretsmanager(action: str, params: Mapping[str, Any], arns: _Arns) -> list[Authorization]:
    secret = str(params.get("SecretId", ""))
    if not secret:
        return [Authorization(action, ("*",))]
    return [Authorization(action, (secret if secret.startswith("arn:") else secret_arn(*arns, secret),))]


def _cloudwatch(action: str, params: Mapping[str, Any], arns: _Arns) -> list[Authorization]:
    # CloudWatch's metric calls take no resource; PutMetricData is conditioned on its namespace.
    if action == "cloudwatch:PutMetricData":
        context = {"cloudwatch:namespace": (str(params.get("Namespace", "")),)}
        return [Authorization(action, ("*",), context, frozenset(context))]
    # DescribeAlarms takes alarm resources: a prefix can return exactly the alarms its pattern names.
    if action == "cloudwatch:DescribeAlarms" and params.get("AlarmNamePrefix"):
        return [Authorization(action, (arns.of("cloudwatch", f"alarm:{params['AlarmNamePrefix']}*"),))]
    return [Authorization(action, ("*",))]


def _dynamodb(action: str, params: Mapping[str, Any], arns: _Arns) -> list[Authorization]:
    operation = action.partition(":")[2]
    if operation == "TransactWriteItems":
        return [
            _item(f"dynamodb:{_TRANSACT_ACTIONS[kind]}", item, arns, enclosing=operation)
            for entry in params.get("TransactItems", [])
            for kind, item in entry.items()
        ]
    if operation == "TransactGetItems":
        return [
            _item("dynamodb:GetItem", entry["Get"], arns, enclosing=operation)
            for entry in params.get("TransactItems", [])
        ]
    if operation == "BatchGetItem":
        return [_batch_get(action, table, request, arns) for table, request in params.get("RequestItems", {}).items()]
    if operation in ("GetItem", "PutItem", "UpdateItem", "DeleteItem"):
        return [_item(action, params, arns)]
    table = _table_arn(str(params.get("TableName", "*")), arns)
    if params.get("IndexName"):
        table = f"{table}/index/{params['IndexName']}"
    return [Authorization(action, (table,))]


def _table_arn(name: str, arns: _Arns) -> str:
    return name if name.startswith("arn:") else arns.of("dynamodb", f"table/{name}")


def _item(action: str, params: Mapping[str, Any], arns: _Arns, *, enclosing: str | None = None) -> Authorization:
    """One item's read or write: the partition key's value, the attributes it names, what it returns."""
    key = params.get("Key") or params.get("Item") or {}
    names = params.get("ExpressionAttributeNames", {})
    attributes = set(key if "Key" in params else ())
    if "Item" in params:
        attributes |= set(params["Item"])
    for field in ("UpdateExpression", "ConditionExpression"):
        attributes |= _expression_attributes(params.get(field, ""), names)
    if action == "dynamodb:GetItem":
        attributes |= _projection(params, names)
    context: dict[str, tuple[str, ...]] = {
        "dynamodb:LeadingKeys": (_partition_value(key),),
        "dynamodb:Attributes": tuple(sorted(attributes)),
    }
    if "ReturnValues" in params:
        context["dynamodb:ReturnValues"] = (str(params["ReturnValues"]),)
    if enclosing:
        context["dynamodb:EnclosingOperation"] = (enclosing,)
    return Authorization(action, (_table_arn(str(params["TableName"]), arns),), context, _ITEM_KEYS)


def _batch_get(action: str, table: str, request: Mapping[str, Any], arns: _Arns) -> Authorization:
    keys = request.get("Keys", [])
    names = request.get("ExpressionAttributeNames", {})
    attributes = {name for key in keys for name in key} | _projection(request, names)
    context = {
        "dynamodb:LeadingKeys": tuple(sorted({_partition_value(key) for key in keys})),
        "dynamodb:Attributes": tuple(sorted(attributes)),
    }
    return Authorization(action, (_table_arn(table, arns),), context, _ITEM_KEYS)


def _projection(params: Mapping[str, Any], names: Mapping[str, str]) -> set[str]:
    """Attributes a read returns: its projection, or every attribute (``*``) without one."""
    if params.get("ProjectionExpression"):
        return _expression_attributes(params["ProjectionExpression"], names)
    if params.get("AttributesToGet"):
        return set(params["AttributesToGet"])
    return {"*"}


def _partition_value(key: Mapping[str, Mapping[str, Any]]) -> str:
    """The partition key's value in ``key`` (a key of one attribute, or the contract's partition key)."""
    name = next(iter(key)) if len(key) == 1 else next((n for n in _PARTITION_KEYS if n in key), None)
    if name is None:
        raise ValueError(f"cannot tell the partition key of {sorted(key)}")
    (value,) = key[name].values()
    return str(value)


def _expression_attributes(expression: str, names: Mapping[str, str]) -> set[str]:
    """Top-level attribute names in a DynamoDB expression (``#placeholders`` resolved; functions, keywords,
    ``:values`` and nested path elements left out)."""
    found = set()
    previous = ""
    for match in _EXPRESSION_TOKEN.finditer(expression):
        token, after = match[0], expression[match.end() :].lstrip()
        nested, previous = previous in (".", "["), token
        if token in (".", "[") or token.startswith(":") or nested:
            continue
        if token.startswith("#"):
            found.add(names.get(token, token))
        elif token.lower() not in _EXPRESSION_WORDS and not after.startswith("("):
            found.add(token)
    return found


# The ACR emulator: the bedrock-agentcore data plane and the control plane's GetAgentRuntime ---------------------


def _agentcore(request: HttpRequest, arns: _Arns) -> tuple[str, list[Authorization]]:
    call = _RUNTIME_CALL.match(request.path)
    if call and request.method == "POST":
        runtime, what = call[1], call[2]
        qualifier = request.query.get("qualifier", [DEFAULT_QUALIFIER])[0]
        operation = "InvokeAgentRuntime" if what == "invocations" else "StopRuntimeSession"
        endpoint = f"{runtime}/runtime-endpoint/{qualifier}"
        return operation, [Authorization(f"bedrock-agentcore:{operation}", (runtime, endpoint))]
    control = _CONTROL_RUNTIME.match(request.path)
    if control and request.method == "GET":
        runtime = arns.of("bedrock-agentcore", f"runtime/{control[1]}")
        return "GetAgentRuntime", [Authorization("bedrock-agentcore:GetAgentRuntime", (runtime,))]
    operation, action = _unknown("bedrock-agentcore", request, "")
    return operation, [Authorization(action, ())]
