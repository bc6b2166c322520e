"""Differential: the same handlers under agentcore-rl-toolkit 0.2.0's ``AgentCoreRLApp`` and under ours.

Each case (``agents/art_cases.py``) runs through ART's real app and through ours, both driven as ACR drives
them (``/invocations`` with the session header, moto S3 in-process); the stored documents are compared field by
field. Everything outside our one key (``_agentcore_rollouts``) must be what ART stored, types included (a
``1`` stays an int, ``NaN`` stays ``NaN``); a traceback is compared by its last line (the frames are each
package's own). Our reader must also give ART's document the status our agent stored for the same case.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agentcore_rl_toolkit")

sys.path.insert(0, str(Path(__file__).parent / "agents"))

from agentcore_rl_toolkit import AgentCoreRLApp as ArtApp  # noqa: E402
from art_cases import CASES, FIDELITY_PROBES, async_handler, sync_handler  # noqa: E402
from moto import mock_aws  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

from agent_app import AgentCoreRLApp  # noqa: E402
from rollout_contract import META_FIELD, RolloutResult, Status  # noqa: E402
from rollout_contract.protocol import SESSION_HEADER  # noqa: E402

BUCKET = "differential"
SESSION = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
ROLLOUT = {"exp_id": "diff", "input_id": "q-1", "s3_bucket": BUCKET, "base_url": "http://model/v1"}
KEY = f"diff/q-1/{SESSION}.json"
#: Cases whose stored documents differ on purpose (case -> why); the README's "Migrating from ART" lists them.
DELIBERATE: dict[str, str] = {}


@pytest.fixture
def s3(boto_session, monkeypatch) -> Iterator[Any]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    with mock_aws():
        client = boto_session.client("s3")
        client.create_bucket(Bucket=BUCKET)
        yield client


@pytest.fixture(autouse=True)
def root_logging() -> Iterator[None]:
    """ART's app replaces the root logger's handlers on construction; give pytest's back afterwards."""
    root = logging_root = __import__("logging").getLogger()
    saved = (list(root.handlers), root.level)
    yield
    logging_root.handlers[:] = saved[0]
    logging_root.setLevel(saved[1])
    logging_root.__dict__.pop("_art_logging_configured", None)


def _run(app: Any, handler: Callable[..., Any], case: str, s3: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Invoke ``app`` once as ACR would; return its answer and the document it stored (then delete it)."""
    app.rollout_entrypoint(handler)
    with TestClient(app) as client:
        response = client.post(
            "/invocations", json={"case": case, "_rollout": ROLLOUT}, headers={SESSION_HEADER: SESSION}
        )
        deadline = time.monotonic() + 10
        while not s3.list_objects_v2(Bucket=BUCKET, Prefix=KEY).get("KeyCount"):
            assert time.monotonic() < deadline, f"{type(app).__module__}: no result for case {case}"
            time.sleep(0.01)
    stored = json.loads(s3.get_object(Bucket=BUCKET, Key=KEY)["Body"].read())
    s3.delete_object(Bucket=BUCKET, Key=KEY)
    return response.json(), stored


def _art_app(s3: Any) -> ArtApp:
    app = ArtApp()
    app.s3_client = s3
    return app


def art_view(document: dict[str, Any]) -> str:
    """The document as ART's readers see it, our key left out, a traceback by its last line; exact JSON text."""
    view = {name: value for name, value in document.items() if name != META_FIELD}
    if isinstance(view.get("traceback"), str):
        view["traceback"] = view["traceback"].rstrip().splitlines()[-1]
    return json.dumps(view, sort_keys=True)


@pytest.mark.parametrize("handler", [sync_handler, async_handler], ids=["sync", "async_with_context"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_we_store_what_art_stores(case, handler, s3):
    # GIVEN the same handler outcome under ART's app and ours
    art_answer, art_document = _run(_art_app(s3), handler, case, s3)
    our_answer, our_document = _run(AgentCoreRLApp(s3_client=s3), handler, case, s3)

    # THEN both answered alike and stored the same document, ours plus one key
    assert our_answer == art_answer
    if case in DELIBERATE:
        assert art_view(our_document) != art_view(art_document), f"{case} no longer differs: {DELIBERATE[case]}"
        return
    assert art_view(our_document) == art_view(art_document)
    assert set(our_document) - set(art_document) == {META_FIELD}
    # AND our reader gives ART's document the status our agent stored for it (one rule, ART's fields)
    ours, arts = RolloutResult(our_document), RolloutResult(art_document)
    assert arts.status is ours.status and arts.reward == ours.reward
    assert (arts.error is None) == (ours.error is None)


def test_the_fidelity_probes_are_the_issues_cases_and_unreadable_rewards_are_refused_by_status(s3):
    # GIVEN the fidelity probes: each stores exactly as ART (the parametrized test above), and each status is
    assert set(FIDELITY_PROBES) <= set(CASES) and len(FIDELITY_PROBES) == 14
    statuses = {case: RolloutResult(_run(AgentCoreRLApp(s3_client=s3), sync_handler, case, s3)[1]).status
                for case in FIDELITY_PROBES}  # fmt: skip

    # THEN a reward that is not a finite number or a list of them fails the rollout (ART would have trained on a
    # NaN, and read no reward from the others); the rest succeed
    assert {case for case, status in statuses.items() if status is not Status.SUCCEEDED} == {
        "rewards_nan",
        "rewards_inf",
        "rewards_dict",
        "rewards_nested",
        "rewards_none_in_list",
    }
