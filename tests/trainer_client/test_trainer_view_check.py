"""How the views find which listed rollouts have a stored result: pages of a run's prefix while they pass its input
ids densely, else one list per input id (``trainer_client._sessions._stored``, D105). A call costs a fixed amount
and more with each key it returns, so both are counted."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from trainer_client._sessions import KEYS_PER_CALL, _stored


class PagedBucket:
    """S3's ListObjectsV2 over some keys (at most ``MaxKeys`` a page); counts walks, lists and keys returned."""

    def __init__(self, keys: list[str]) -> None:
        self.keys = sorted(keys)
        self.walks = self.lists = self.returned = 0

    def list_objects_v2(
        self,
        Bucket: str,  # noqa: N803
        Prefix: str,  # noqa: N803
        StartAfter: str = "",  # noqa: N803
        ContinuationToken: str = "",  # noqa: N803
        MaxKeys: int = 1000,  # noqa: N803
    ) -> Any:
        if StartAfter or ContinuationToken:
            self.walks += 1
        else:
            self.lists += 1
        after = ContinuationToken or StartAfter
        matching = [key for key in self.keys if key.startswith(Prefix) and key > after]
        shown = matching[:MaxKeys]
        self.returned += len(shown)
        truncated = len(matching) > MaxKeys
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
                    bucket.walks -= 1  # a list's own next page, not a walk

        return Paginator()


def _found(bucket: PagedBucket, prefixes: set[str], wanted: set[str]) -> list[str]:
    """The keys the check finds and reads (a read here returns its key)."""
    with ThreadPoolExecutor(4) as pool:
        return sorted(_stored(bucket, "b", prefixes, wanted, pool, lambda key: key))  # type: ignore[arg-type]


def test_input_ids_in_flight_side_by_side_cost_one_call_of_few_keys_among_many_ended() -> None:
    # GIVEN an eval's 1,200 ended rollouts and 30 in flight side by side, 10 of those with a result just stored
    stored = [f"exp/row-{n:04}/s.json" for n in range(1200)]
    prefixes = {f"exp/row-{n:04}/" for n in range(600, 630)}
    wanted = {f"exp/row-{n:04}/s.json" for n in range(600, 630, 3)} | {"exp/row-0629/other.json"}
    bucket = PagedBucket(stored)
    # WHEN the view checks them THEN it finds exactly the stored ones it wants
    assert _found(bucket, prefixes, wanted) == sorted(wanted - {"exp/row-0629/other.json"})
    # AND in one call returning two keys per input id (D99's walk returned a page of 600 keys from the first)
    assert (bucket.walks, bucket.lists, bucket.returned) == (1, 0, 2 * len(prefixes))


def test_input_ids_far_apart_are_listed_one_each_after_a_page_that_did_not_pay() -> None:
    # GIVEN 30 input ids in flight, each 40 keys of ended rollouts from the next
    stored = [f"exp/row-{n:04}/s.json" for n in range(1200)]
    prefixes = {f"exp/row-{n:04}/" for n in range(0, 1200, 40)}
    wanted = {f"{prefix}s.json" for prefix in prefixes}
    bucket = PagedBucket(stored)
    # WHEN the view checks them THEN it finds all, the walk given up after its first page (60 keys, 2 input ids)
    assert _found(bucket, prefixes, wanted) == sorted(wanted)
    assert (bucket.walks, bucket.lists) == (1, len(prefixes) - 2)
    # AND reads no more keys than about two calls per input id would cost
    assert bucket.returned <= len(prefixes) * (1 + 2 * KEYS_PER_CALL)


def test_runs_are_walked_apart_and_a_lone_input_id_is_listed_alone() -> None:
    # GIVEN two input ids of an experiment with a nested run's keys between them, and one of that run
    stored = ["exp/a/1.json", "exp/b/2.json", "exp/run/a/3.json", "exp/run/c/4.json", "exp/z/5.json"]
    bucket = PagedBucket(stored)
    prefixes = {"exp/a/", "exp/z/", "exp/run/a/"}
    wanted = {"exp/a/1.json", "exp/z/5.json", "exp/run/a/3.json"}
    # WHEN checked THEN the experiment's page (4 keys: two per input id) passes the first, the last is listed alone,
    # and so is the run's one input id
    assert _found(bucket, prefixes, wanted) == sorted(wanted)
    assert (bucket.walks, bucket.lists) == (1, 2)
