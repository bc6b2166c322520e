"""Each client's boto3 session is its own, but the parsed service models are shared (no re-parse per client)."""

from __future__ import annotations

from rollout_contract.aws import new_session


def test_sessions_are_distinct_but_share_one_loader_whose_paths_do_not_grow() -> None:
    # GIVEN a first session
    first = new_session("us-east-1")
    loader = first._session.get_component("data_loader")
    paths = list(loader.search_paths)
    # WHEN more sessions are made, for other regions too
    others = [new_session(region) for region in ("us-east-1", "us-west-2", None)]
    # THEN each is a session of its own with the region asked for, all read models through the same loader,
    # and boto3's data directory, appended by every session, is on the loader's path once
    assert len({id(s) for s in (first, *others)}) == 4
    assert [s.region_name for s in others[:2]] == ["us-east-1", "us-west-2"]
    assert all(s._session.get_component("data_loader") is loader for s in others)
    assert loader.search_paths == paths
    assert len(set(loader.search_paths)) == len(loader.search_paths)
