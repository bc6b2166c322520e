"""Settings objects: frozen pydantic models whose bad values raise one plain sentence, not pydantic's report (D85).

A :class:`Settings` subclass declares each field with its default and bounds once (``Field(ge=1)``, ``gt=0``,
``le=...``) and validators for what pydantic cannot check alone. Built with a bad value it raises
:class:`SettingsError` (a ``ValueError``) naming the field (or its alias), the value and what to give:
``batch_size must be from 1 to 10, got 11``; a validator's own ``ValueError`` is raised as it is.
Unknown names are refused (a misspelt setting is an error, as a dataclass's keyword was).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any

from annotated_types import Ge, Gt, Le, Lt
from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError
from pydantic_core import ErrorDetails

__all__ = ["PathValue", "Settings", "SettingsError", "bounds_text", "settings_error"]

_BOUND_ERRORS = ("greater_than", "greater_than_equal", "less_than", "less_than_equal")
#: The bound a bound error's ``ctx`` names, as the field's metadata holds it.
_CTX_BOUNDS = {"ge": Ge, "gt": Gt, "le": Le, "lt": Lt}


class SettingsError(ValueError):
    """A setting is missing, unknown or invalid; the message names it and says what to give."""


class Settings(BaseModel):
    """A frozen settings object built by keyword; a bad value raises :class:`SettingsError`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise settings_error(exc.errors()[0], type(self)) from None


def _fspath(value: Any) -> Any:
    return os.fspath(value) if isinstance(value, os.PathLike) else value


#: A path given as ``str``, ``pathlib.Path`` or any ``os.PathLike``, held as a ``Path``.
PathValue = Annotated[Path, BeforeValidator(_fspath)]


def bounds_text(constraints: Iterable[object]) -> str:
    """Bounds in words (``from 1 to 10``, ``at least 1``, ``positive``, ...) from a field's ``metadata``."""
    constraints = list(constraints)
    low = next((bound for bound in constraints if isinstance(bound, Ge | Gt)), None)
    high = next((bound for bound in constraints if isinstance(bound, Le | Lt)), None)
    if isinstance(low, Ge) and isinstance(high, Le):
        return f"from {low.ge} to {high.le}"
    words = []
    if isinstance(low, Gt):
        words.append("positive" if low.gt == 0 else f"greater than {low.gt}")
    elif isinstance(low, Ge):
        words.append(f"at least {low.ge}")
    if isinstance(high, Lt):
        words.append(f"less than {high.lt}")
    elif isinstance(high, Le):
        words.append(f"at most {high.le}")
    return " and ".join(words)


def settings_error(error: ErrorDetails, model: type[BaseModel]) -> ValueError:
    """One of pydantic's errors about ``model`` as the exception to raise: a validator's own ``ValueError`` as it
    is, else a :class:`SettingsError` saying what is wrong with which setting and what to give."""
    reason = error.get("ctx", {}).get("error")
    if isinstance(reason, ValueError):
        return reason
    return SettingsError(_message(error, model))


def _message(error: ErrorDetails, model: type[BaseModel]) -> str:
    name = ".".join(str(part) for part in error["loc"])
    kind, value = error["type"], error["input"]
    # An error about one of the model's own fields (by name or alias); one inside a nested model or a collection
    # has a longer loc.
    top = len(error["loc"]) == 1
    field = next((f for key, f in model.model_fields.items() if top and error["loc"][0] in (key, f.alias)), None)
    if kind == "missing":
        return f"{name} is required"
    if kind == "extra_forbidden":
        known = sorted(f.alias or key for key, f in model.model_fields.items())
        return f"unknown setting {name}" + (f"; {model.__name__} takes {', '.join(known)}" if top else "")
    if kind in _BOUND_ERRORS:
        ctx = error.get("ctx", {})
        violated = [bound(ctx[key]) for key, bound in _CTX_BOUNDS.items() if key in ctx]
        return f"{name} must be {bounds_text(violated if field is None else field.metadata)}, got {value!r}"
    if kind == "literal_error":
        return f"{name} must be {error['ctx']['expected']}, got {value!r}"
    return f"{name}: {error['msg']}, got {value!r}"
