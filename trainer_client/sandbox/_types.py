"""What a sandbox command returns and the errors sandboxes raise (ART 0.2.0's names).

- RuntimeError (ART's sandbox errors are ``RuntimeError`` s)
    - SandboxError: also a failed AWS call (botocore's error is ``__cause__``).
        - ExecError: a command could not be submitted, recovered or completed; ``handle`` identifies it.
            - ExecTimeoutError: the command's deadline passed; ``result`` holds what it wrote.
        - SandboxProtocolError: the runtime does not answer as a sandbox does.
        - SandboxEndedError: the sandbox was terminated or passed its deadline.
        - SandboxCapacityError: no session slot came free within the wait allowed.

No botocore error leaves a public method. Bad arguments are ``TypeError`` / ``ValueError``, as in ART.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields
from typing import TYPE_CHECKING, Any

from rollout_contract.sandbox import RESULT_FIELD_TYPES

if TYPE_CHECKING:
    from trainer_client.sandbox._client import ExecHandle

__all__ = [
    "ExecError",
    "ExecResult",
    "ExecTimeoutError",
    "SandboxCapacityError",
    "SandboxEndedError",
    "SandboxError",
    "SandboxProtocolError",
]


@dataclass
class ExecResult:
    """A finished command: exit code (-1: ended by a signal), output, and flags (ART's ``ExecResult``).

    A nonzero exit is a result, not an error; a command past its deadline raises :class:`ExecTimeoutError` with
    its result. Each stream keeps its first 256 KiB; ``*_truncated`` says more came.
    """

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool
    stdout_truncated: bool = False
    stderr_truncated: bool = False

    @classmethod
    def parse(cls, value: Any) -> ExecResult:
        """Read a completed command's ``result`` object.

        Raises:
            SandboxProtocolError: it is not an object of ART's fields and types.
        """
        if not isinstance(value, dict):
            raise SandboxProtocolError(f"invalid command result: expected a JSON object, got {value!r}"[:500])
        parsed: dict[str, Any] = {}
        for field in fields(cls):
            item = value.get(field.name, field.default)
            if item is MISSING:
                raise SandboxProtocolError(f"invalid command result: missing {field.name}")
            wanted = RESULT_FIELD_TYPES[field.name]
            if type(item) is not wanted:  # exactly: a bool is no exit code
                raise SandboxProtocolError(f"invalid command result: {field.name} must be {wanted.__name__}: {item!r}")
            parsed[field.name] = item
        return cls(**parsed)


class SandboxError(RuntimeError):
    """Base of the sandbox errors; raised itself when an AWS call failed (botocore's error is ``__cause__``)."""


class ExecError(SandboxError):
    """A command could not be submitted, recovered or completed.

    ``handle`` keeps the command's identity, also when a lost connection leaves its submission unknown: its
    ``result()`` finds out. A transport error is ``__cause__``. A nonzero exit is not an error.
    """

    def __init__(self, message: str, handle: ExecHandle) -> None:
        super().__init__(f"Invocation {handle.invocation_id}: {message}")
        self.handle = handle


class ExecTimeoutError(ExecError):
    """The command's deadline passed (output waiting included); ``result`` holds its output and exit code."""

    def __init__(self, handle: ExecHandle, result: ExecResult) -> None:
        super().__init__("execution timed out", handle)
        self.result = result


class SandboxProtocolError(SandboxError):
    """The runtime does not answer as a sandbox does (an agent image deployed instead of the sandbox image?)."""


class SandboxEndedError(SandboxError):
    """The sandbox was terminated or passed its deadline: its session is (or is about to be) stopped.

    Nothing is sent for it any more: after a stop, ACR would start a fresh, empty session under the same id.
    """


class SandboxCapacityError(SandboxError):
    """No session slot of the shared session budget came free within the client's ``queue_timeout``."""
