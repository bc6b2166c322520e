"""Conditional writes the one way (DynamoDB conditions, S3's ``If-None-Match``) and DynamoDB values.

Used by the ledger, the TPS budget and the result store.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from botocore.exceptions import ClientError

from rollout_contract.aws import error_code

#: The error code of a DynamoDB write whose condition failed.
CONDITION_FAILED = "ConditionalCheckFailedException"
#: The error code of an S3 write whose precondition (``If-None-Match``) failed.
PRECONDITION_FAILED = "PreconditionFailed"


class Written(NamedTuple):
    """What a conditional write did."""

    #: The condition held and the write was made.
    ok: bool
    #: The call's response; on a failed condition the error's (``Item`` there when it was asked for).
    response: Mapping[str, Any]


def conditional_write(
    call: Callable[..., Mapping[str, Any]], *, failed: str = CONDITION_FAILED, **request: Any
) -> Written:
    """Make a conditional write (``update_item``, ``put_object``, ...); the error code ``failed`` is an answer."""
    try:
        return Written(True, call(**request))
    except ClientError as exc:
        if error_code(exc) != failed:
            raise
        return Written(False, dict(exc.response))


def returned_item(exc: ClientError) -> Mapping[str, Any] | None:
    """The item a write whose condition failed returned (``ReturnValuesOnConditionCheckFailure``), if any.

    DynamoDB puts it in the error response, which botocore's stubs type without it.
    """
    response: Mapping[str, Any] = exc.response
    item: Mapping[str, Any] | None = response.get("Item")
    return item


def s(value: str) -> dict[str, str]:
    """A string attribute value."""
    return {"S": str(value)}


def n(value: float) -> dict[str, str]:
    """A number attribute value (a float exactly as Python prints it)."""
    return {"N": repr(value) if isinstance(value, float) else str(value)}
