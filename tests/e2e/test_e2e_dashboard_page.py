"""The dashboard page in a real browser (Debian's chromium), on data shaped as issue 38 saw it: a budget of 1,500
invokes a minute over about 150, a session lifetime of 28,800 s over an 11 s rollout. The axes follow the series,
the reference lines are drawn at the top labelled with their values, every axis names its unit; and a young stack's
page, where no point is drawn before the stack started."""

from __future__ import annotations

import html
import re
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from e2e_support import browse, headless_browser

from trainer_client._dashboard import server

pytestmark = pytest.mark.e2e

SCREENSHOT = Path("/tmp/dashboard-page.png")
START_SCREENSHOT = Path("/tmp/dashboard-page-young-stack.png")


class Reader:
    """What ``DashboardReader.read`` gives, for two graphs, a minute and a half into a stack's life."""

    title = "exp-page"

    def read(self) -> dict[str, Any]:
        now = time.time()
        minutes = [now - 90 + 10 * i for i in range(10)]
        invokes = [[t * 1000, 140 + 3 * i] for i, t in enumerate(minutes)]
        longest = [[t * 1000, 11.0 + i % 2] for i, t in enumerate(minutes)]
        return {
            "title": self.title, "at": now * 1000, "window_s": 3600,
            "widgets": [
                {"kind": "graph", "title": "Submitted, dispatched, stopped, succeeded", "width": 12,
                 "series": [{"label": "dispatched", "axis": "left", "points": invokes}],
                 "lines": [{"value": 1500, "label": "invoke budget"}],
                 "units": {"left": "per minute", "right": "per minute"}},
                {"kind": "graph", "title": "Longest rollout vs session lifetime (s)", "width": 12,
                 "series": [{"label": "longest rollout", "axis": "left", "points": longest}],
                 "lines": [{"value": 28800, "label": "max session lifetime"}],
                 "units": {"left": "seconds", "right": "per minute"}},
            ],
        }  # fmt: skip


def _page(reader: Reader | YoungStack, screenshot: Path) -> str:
    """The page's DOM once its scripts ran in chromium, with ``reader`` behind it; a screenshot saved."""
    browser = headless_browser()
    with server(reader, 0) as serving:  # type: ignore[arg-type]
        threading.Thread(target=serving.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{serving.server_address[1]}/"
        try:
            dom = html.unescape(browse(browser, url, "--dump-dom"))
            browse(browser, url, f"--screenshot={screenshot}", "--window-size=1200,420", "--hide-scrollbars")
        finally:
            serving.shutdown()
    print(f"dashboard page screenshot: {screenshot}")
    return dom


def test_the_axes_follow_the_series_and_off_scale_lines_say_their_value() -> None:
    dom = _page(Reader(), SCREENSHOT)
    # THEN each left axis tops out just above its data (200 per minute, 20 s), not at the budget or the lifetime
    assert re.findall(r'data-top="([\d.]+)"', dom) == ["200", "20"]
    # AND each reference line is drawn at the top, labelled with its value, and every axis names its unit
    assert dom.count('data-off-scale="true"') == 2
    assert "invoke budget: 1.5k (above the scale)" in dom and "max session lifetime: 28.8k (above the scale)" in dom
    assert ">per minute<" in dom and ">seconds<" in dom
    assert SCREENSHOT.stat().st_size > 5_000


class YoungStack:
    """A stack started 90 s ago whose "Dispatch lag" has a 5-minute point stamped 200 s before the stack existed
    (the queue metric's period began then), then 1-minute points."""

    title = "exp-young"

    def __init__(self) -> None:
        self.now = time.time()
        self.started_at = self.now - 90

    def read(self) -> dict[str, Any]:
        oldest = [[(self.started_at - 200) * 1000, 4.0]]
        p90 = [[(self.started_at + 20 + 30 * i) * 1000, 1.0 + i] for i in range(3)]
        return {
            "title": self.title, "at": self.now * 1000, "started_at": self.started_at * 1000, "window_s": 3600,
            "widgets": [
                {"kind": "graph", "title": "Dispatch lag (s)", "width": 12,
                 "series": [{"label": "oldest dispatch request (s)", "axis": "left", "points": oldest},
                            {"label": "submitted -> dispatched p90", "axis": "left", "points": p90}],
                 "lines": [], "units": {"left": "seconds", "right": "per minute"}},
            ],
        }  # fmt: skip


def test_no_point_is_drawn_before_the_stack_started() -> None:
    reader = YoungStack()
    dom = _page(reader, START_SCREENSHOT)
    # THEN the time axis starts at the stack's start (was: 210 s before it, at the 5-minute point's stamp)
    assert re.findall(r'data-from="([\d.]+)"', dom) == [repr(reader.started_at * 1000)]
    started = datetime.fromtimestamp(reader.started_at, UTC).strftime("%H:%M:%S")
    assert f'text-anchor="start">{started}<' in dom
    # AND the 5-minute point is drawn at the start, on the axis' left edge, not before it; the rest after it
    xs = sorted(float(x) for x in re.findall(r'<circle cx="([\d.]+)"', dom))
    assert len(xs) == 4 and xs[0] == 46.0 and xs[1] > 46.0  # PAD.left: the plot's left edge
    assert START_SCREENSHOT.stat().st_size > 5_000
