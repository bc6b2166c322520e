"""How the views find which listed rollouts have a stored result: the pages of a run's prefix, or one list per input
id, whichever takes fewer calls (``trainer_client._sessions._stored_keys``)."""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from trainer_client._sessions import _stored_keys


class PagedBucket:
    """S3's ListObjectsV2 over some keys, ``page`` keys a page, each call counted."""

    def __init__(self, keys: list[str], page: int) -> None:
        self.keys, self.page, self.calls = sorted(keys), page, Counter[str]()

    def list_objects_v2(self, Bucket: str, Prefix: str, StartAfter: str = "", ContinuationToken: str = "") -> Any:  # noqa: N803
        self.calls["walk" if StartAfter or ContinuationToken else "prefix"] += 1
        after = ContinuationToken or StartAfter
        matching = [key for key in self.keys if key.startswith(Prefix) and key > after]
        shown = matching[: self.page]
        truncated = len(matching) > self.page
        return {
            "Contents": [{"Key": key} for key in shown],
            "IsTruncated": truncated,
            **({"NextContinuationToken": shown[-1]} if truncated else {}),
        }

    def get_paginator(self, name: str) -> Any:
        bucket = self

        class Paginator:
            def paginate(self, Bucket: str, Prefix: str) -> Any:  # noqa: N803
                token = ""
                while True:
                    page = bucket.list_objects_v2(Bucket, Prefix, ContinuationToken=token)
                    yield page
                    if not page["IsTruncated"]:
                        return
                    token = page["NextContinuationToken"]

        return Paginator()


def _stored(bucket: PagedBucket, prefixes: set[str], wanted: set[str]) -> list[str]:
    with ThreadPoolExecutor(4) as pool:
        return _stored_keys(bucket, "b", prefixes, wanted, pool)  # type: ignore[arg-type]


def test_a_run_whose_results_fit_in_a_page_is_checked_with_one_list_whatever_its_input_ids() -> None:
    # GIVEN 40 input ids in flight, 25 of them with a stored result, among 60 results of the experiment
    stored = [f"exp/row-{n:02}/s{n}.json" for n in range(60)]
    prefixes = {f"exp/row-{n:02}/" for n in range(20, 60)}
    wanted = {f"exp/row-{n:02}/s{n}.json" for n in range(20, 45)} | {"exp/row-59/other.json"}
    bucket = PagedBucket(stored, page=1000)
    # WHEN the view checks them THEN it finds exactly the stored ones it wants, in one call (was: 40)
    assert _stored(bucket, prefixes, wanted) == sorted(wanted - {"exp/row-59/other.json"})
    assert bucket.calls == Counter({"walk": 1})


def test_a_run_spread_over_many_pages_costs_at_most_twice_one_list_per_input_id() -> None:
    # GIVEN results that span many pages of 3 keys, and three input ids in flight far apart
    stored = [f"exp/row-{n:03}/s.json" for n in range(300)]
    prefixes = {"exp/row-001/", "exp/row-150/", "exp/row-299/"}
    wanted = {f"{prefix}s.json" for prefix in prefixes}
    bucket = PagedBucket(stored, page=3)
    # WHEN the view checks them THEN it finds all three, the walk given up once it would cost more than the lists
    assert _stored(bucket, prefixes, wanted) == sorted(wanted)
    assert sum(bucket.calls.values()) <= 2 * len(prefixes) and bucket.calls["prefix"] >= 1


def test_runs_are_walked_apart_and_a_lone_input_id_is_listed_alone() -> None:
    stored = ["exp/a/1.json", "exp/b/2.json", "exp/run/a/3.json", "exp/run/c/4.json", "exp/z/5.json"]
    bucket = PagedBucket(stored, page=1000)
    prefixes = {"exp/a/", "exp/z/", "exp/run/a/"}
    wanted = {"exp/a/1.json", "exp/z/5.json", "exp/run/a/3.json"}
    assert _stored(bucket, prefixes, wanted) == sorted(wanted)
    assert bucket.calls == Counter({"walk": 1, "prefix": 1})
