"""``rollouts dashboard``: the CDK dashboard's definition read from CloudWatch, SEARCH and math done locally."""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
import urllib.request
from datetime import UTC, datetime, timedelta

import pytest
from trainer_support import alarm_in_state, aws

from rollout_contract import Status
from rollout_contract import metrics as names
from rollout_contract import monitoring as spec
from trainer_client._cli import main
from trainer_client._dashboard import DashboardReader, evaluate, experiment_started_at, monitored, server


def _publish(namespace: str, name: str, values: list[float], **dimensions: str) -> None:
    """Data points two seconds ago (moto reads up to the second)."""
    aws("cloudwatch").put_metric_data(
        Namespace=namespace,
        MetricData=[
            {
                "MetricName": name,
                "Dimensions": [{"Name": key, "Value": value} for key, value in dimensions.items()],
                "Timestamp": datetime.now(UTC) - timedelta(seconds=2),
                "Value": value,
            }
            for value in values
        ],
    )


def test_math_is_evaluated_per_timestamp_with_fill_and_without_points_it_cannot_compute() -> None:
    seconds, rollouts = {60.0: 7200.0, 120.0: 3600.0, 180.0: 1.0}, {60.0: 2.0, 120.0: 0.0}
    # THEN a point missing in one series, or divided by zero, is left out; FILL stands in for a missing one
    assert evaluate("1000 * seconds / 3600 / rollouts", {"seconds": seconds, "rollouts": rollouts}) == {60.0: 1000.0}
    assert evaluate("FILL(a, 0) + FILL(b, 0)", {"a": {1.0: 2.0}, "b": {2.0: 3.0}}) == {1.0: 2.0, 2.0: 3.0}
    # AND what the renderer cannot evaluate is refused by name
    with pytest.raises(ValueError, match="cannot evaluate 'RATE\\(a\\)'"):
        evaluate("RATE(a)", {"a": {1.0: 1.0}})


def test_every_widget_of_the_definition_is_read_with_searches_resolved_and_math_computed(descriptor) -> None:
    # GIVEN completions and durations of the experiment, completions of two runs (and metrics that a SEARCH of
    # this experiment's runs must not find: another experiment's, and one with a dimension more)
    exp = descriptor.exp_id
    _publish(names.NAMESPACE, names.COMPLETED, [3], exp_id=exp, status=Status.SUCCEEDED.value)
    _publish(names.NAMESPACE, names.DURATION, [1800.0, 5400.0], exp_id=exp)
    # (in the finisher's order of dimensions: moto finds three only in the order they were put with)
    _publish(names.NAMESPACE, names.COMPLETED, [2], exp_id=exp, status=Status.SUCCEEDED.value, run="sweep/lr-1")
    _publish(names.NAMESPACE, names.COMPLETED, [1], exp_id=exp, status=Status.AGENT_ERROR.value, run="r2")
    _publish(names.NAMESPACE, names.COMPLETED, [9], exp_id="other", status=Status.SUCCEEDED.value, run="r2")
    _publish(names.NAMESPACE, names.COMPLETED, [9], exp_id=exp, status="succeeded", run="r2", extra="x")
    alarm_in_state(exp, "StuckRollouts", "ALARM")
    # WHEN the dashboard is read
    cloudwatch = aws("cloudwatch")
    data = DashboardReader(descriptor, cloudwatch).read()
    widgets = {widget["title"]: widget for widget in data["widgets"]}

    def lines(title: str) -> dict[str, list[float]]:
        return {s["label"]: [value for _, value in s["points"]] for s in widgets[title]["series"]}

    # THEN it has the definition's widgets, in its order, each graph with the definition's lines and budgets
    definition = spec.dashboard(monitored(descriptor))
    assert [w["title"] for w in data["widgets"]] == [w.title for row in definition.rows for w in row]
    assert lines("Submitted, dispatched, stopped, succeeded")["succeeded"] == [3.0]
    assert [line["value"] for line in widgets["Submitted, dispatched, stopped, succeeded"]["lines"]] == [25 * 60]
    # AND a SEARCH draws one line per run and status of this experiment, labelled by the values found
    assert lines("Completed by run and status") == {"sweep/lr-1 succeeded": [2.0], "r2 agent_error": [1.0]}
    # AND the math is computed: 2 hours of sessions, $0.2546 an hour, over 2 rollouts: $254.6 per 1,000
    (cost,) = (s for s in widgets["Session-hours and cost"]["series"] if s["axis"] == "right")
    assert lines("Session-hours and cost")["session-hours"] == [2.0]
    assert [round(value, 1) for _, value in cost["points"]] == [254.6]
    # AND the alarms' states are listed
    assert widgets["Alarms"]["alarms"] == [{"name": "StuckRollouts", "state": "ALARM"}]
    # AND one run's view keeps only that run's lines
    one_run = DashboardReader(descriptor, cloudwatch, run="r2").read()
    (per_run,) = (w for w in one_run["widgets"] if w["title"] == "Completed by run and status")
    assert [s["label"] for s in per_run["series"]] == ["agent_error"] and one_run["title"] == f"{exp}/r2"


def test_the_server_answers_the_page_and_its_data_on_localhost(descriptor) -> None:
    # GIVEN the dashboard served on a free port
    with server(DashboardReader(descriptor, aws("cloudwatch")), 0) as serving:
        threading.Thread(target=serving.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{serving.server_address[1]}/"
        try:
            # WHEN the page and its data are fetched
            page = urllib.request.urlopen(url, timeout=10).read().decode()
            data = json.loads(urllib.request.urlopen(url + "data.json", timeout=10).read())
        finally:
            serving.shutdown()
    # THEN the page is self-contained (no script or style from elsewhere) and the data has every widget
    assert 'fetch("data.json"' in page and "src=" not in page
    assert not [url for url in page.split('"') if url.startswith(("http:", "https:", "//")) and "www.w3.org" not in url]
    assert len(data["widgets"]) == sum(len(row) for row in spec.dashboard(monitored(descriptor)).rows)


def test_a_port_in_use_is_refused_with_the_way_out_not_a_traceback(descriptor, capsys) -> None:
    # GIVEN a port something already listens on
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        # WHEN the dashboard is asked to serve on it
        with pytest.raises(SystemExit) as exited:
            main(["dashboard", descriptor.exp_id, "--port", str(port)])

    # THEN it exits as a usage error naming the port and what to pass instead
    assert exited.value.code == 2
    assert f"cannot serve on 127.0.0.1:{port}" in capsys.readouterr().err


def test_a_browser_that_disconnects_leaves_no_traceback(descriptor, capfd) -> None:
    # GIVEN the dashboard served on a free port
    with server(DashboardReader(descriptor, aws("cloudwatch")), 0) as serving:
        threading.Thread(target=serving.serve_forever, daemon=True).start()
        try:
            # WHEN browsers ask for the page and its data and go away before the answer (a reset connection)
            for path in ("/", "/data.json") * 3:
                with socket.create_connection(serving.server_address[:2]) as conn:
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    conn.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            # AND one more reads its page
            url = f"http://127.0.0.1:{serving.server_address[1]}/"
            assert urllib.request.urlopen(url, timeout=10).status == 200
        finally:
            serving.shutdown()
    # THEN the server printed nothing (was: a BrokenPipeError traceback per disconnect) and served on
    err = capfd.readouterr().err
    assert "Traceback" not in err and "BrokenPipeError" not in err


def test_every_graph_says_the_unit_of_its_axes(descriptor) -> None:
    data = DashboardReader(descriptor, aws("cloudwatch")).read()
    units = {w["title"]: w["units"] for w in data["widgets"] if w["kind"] == "graph"}
    assert all(unit["left"] for unit in units.values())
    assert units["Runtime"] == {"left": "per minute", "right": "ms"}
    assert units["Lambda duration p90"]["left"] == "ms" and units["Rollout duration (s)"]["left"] == "seconds"


def test_the_page_is_told_when_the_stack_started_from_its_dispatch_queue(descriptor) -> None:
    # GIVEN an experiment whose queues were just created
    before = time.time()
    # WHEN the dashboard reads when the experiment started, and its data
    started_at = experiment_started_at(aws("sqs"), descriptor)
    data = DashboardReader(descriptor, aws("cloudwatch"), started_at=started_at).read()
    # THEN the start is the dispatch queue's creation (to the second), and the page gets it in unix milliseconds
    assert started_at is not None and before - 60 < started_at <= time.time()
    assert data["started_at"] == started_at * 1000
    # AND a queue that cannot be read gives no start (the page then starts at its first point)
    gone = descriptor.model_copy(update={"dispatch_queue_url": descriptor.dispatch_queue_url + "-gone"})
    assert experiment_started_at(aws("sqs"), gone) is None
    assert DashboardReader(descriptor, aws("cloudwatch")).read()["started_at"] is None
