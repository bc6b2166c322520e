"""Settings models: a bad value is one sentence naming the setting and what to give, not pydantic's report."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import pytest
from pydantic import Field, field_validator

from rollout_contract.settings import PathValue, Settings, SettingsError


class _Checked(ValueError):
    pass


class _Knobs(Settings):
    batch: int = Field(default=1, ge=1, le=10)
    interval_s: float = Field(default=1.0, gt=0)
    workers: int = Field(default=1, ge=1)
    budget: int | None = Field(default=None, ge=1)
    name: str = "x"
    where: PathValue | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        if not name.isidentifier():
            raise _Checked(f"name {name!r} is not an identifier")
        return name


class _Outer(Settings):
    inner: _Knobs = Field(default_factory=_Knobs)
    counts: tuple[Annotated[int, Field(ge=1)], ...] = ()
    sizes: tuple[int, ...] = Field(default=(), max_length=2)


class _PathLike:
    def __fspath__(self) -> str:
        return "some/dir"


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"batch": 11}, "batch must be from 1 to 10, got 11"),
        ({"interval_s": 0}, "interval_s must be positive, got 0"),
        ({"workers": 0}, "workers must be at least 1, got 0"),
        ({"budget": -1}, "budget must be at least 1, got -1"),
        ({"batch": "many"}, "batch: Input should be a valid integer, unable to parse string as an integer, got 'many'"),
        ({"bacth": 2}, "unknown setting bacth; _Knobs takes batch, budget, interval_s, name, where, workers"),
    ],
)
def test_a_bad_setting_is_one_sentence_naming_it_its_value_and_what_to_give(given: dict, message: str) -> None:
    with pytest.raises(SettingsError) as caught:
        _Knobs(**given)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"inner": {"batch": 0}}, "batch must be from 1 to 10, got 0"),
        ({"counts": (1, 0)}, "counts.1 must be at least 1, got 0"),
        ({"sizes": (1, 2, 3)}, "sizes: Tuple should have at most 2 items after validation, not 3, got (1, 2, 3)"),
    ],
)
def test_a_bad_value_inside_a_nested_setting_or_a_collection_is_one_sentence_too(given: dict, message: str) -> None:
    # A nested Settings model speaks for itself; an item of a collection is named by its path
    with pytest.raises(SettingsError) as caught:
        _Outer(**given)
    assert str(caught.value) == message


def test_a_validators_own_error_is_raised_as_it_is() -> None:
    with pytest.raises(_Checked, match="'a b' is not an identifier"):
        _Knobs(name="a b")


def test_settings_are_frozen_and_paths_come_as_str_path_or_pathlike() -> None:
    knobs = _Knobs(where="a/b")
    assert [_Knobs(where=where).where for where in ("a/b", Path("a/b"), _PathLike())] == [
        Path("a/b"),
        Path("a/b"),
        Path(os.fspath(_PathLike())),
    ]
    with pytest.raises(ValueError, match="frozen"):
        knobs.batch = 2  # type: ignore[misc]
