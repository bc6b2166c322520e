"""Conditional writes the one way (DynamoDB conditions, S3's ``If-None-Match``) and DynamoDB values.

Used by the ledger, the TPS budget and the result store.
"""

from __future__ import annotations

from collections.abc import Callable
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
    response: dict[str, Any]


def conditional_write(
    call: Callable[..., dict[str, Any]], *, failed: str = CONDITION_FAILED, **request: Any
) -> Written:
    """Make a conditional write (``update_item``, ``put_object``, ...); the error code ``failed`` is an answer."""
    try:
        return Written(True, call(**request))
    except ClientError as exc:
        if error_code(exc) != failed:
            raise
        return Written(False, dict(exc.response))


def s(value: str) -> dict[str, str]:
    """A string attribute value."""
    return {"S": str(value)}


def n(value: float) -> dict[str, str]:
    """A number attribute value (a float exactly as Python prints it)."""
    return {"N": repr(value) if isinstance(value, float) else str(value)}
