"""``rollouts demo`` (``make demo``): an agent in GRPO groups through the whole local pipeline.

Brings the local stack up, runs ``prompts x samples`` rollouts of the caller's :class:`DemoTask` (the
``rollouts`` command gives the example math agent, ``examples.math_agent.local``) through the real path
(dispatch queue -> dispatcher -> ACR emulator -> agent -> S3 -> EventBridge -> SQS -> trainer, with the
finisher stopping sessions and the gateway capturing token ids), shows a progress bar, prints a summary,
writes every result as JSONL, and shuts everything down.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import httpx
from pydantic import Field, field_validator

from local_stack._process import environment
from local_stack.hosting import DemoTask, LocalAgent
from local_stack.model_endpoint import EndpointSettings
from local_stack.stack import DEFAULT_RUN_DIR, LocalStack
from rollout_contract import InvalidIdError, Status, validate_input_id, validate_timeout_s
from rollout_contract.settings import PathValue, Settings
from trainer_client import (
    BatchItem,
    FailurePolicy,
    GroupCollector,
    PollSettings,
    RolloutClient,
    RolloutGroup,
    read_dataset,
)
from trainer_client._eval import plan_samples
from trainer_client.progress import BatchSummary, RolloutProgress, plural

__all__ = [
    "DemoReport",
    "DemoSettings",
    "DemoTask",
    "ModelUnreachableError",
    "check_model_endpoint",
    "dataset_task",
    "run_demo",
]

DEMO_EXPERIMENT = "demo"
#: How long the demo waits, after the last result, for the finisher to stop the last sessions.
STOP_WAIT_S = 10.0


class DemoSettings(Settings):
    """What the demo runs.

    Attributes:
        prompts: dataset prompts to use (the task's dataset, generated with ``seed``).
        samples_per_prompt: GRPO group size.
        concurrency: rollouts in flight at most.
        temperature: sampling temperature (the stand-in model's error rate grows with it).
        timeout_s: each rollout's deadline.
        seed: dataset seed.
        policy: what to do with groups that have failed members.
        model_url: a real OpenAI-compatible endpoint (``http://host:port/v1``) instead of the stand-in.
        model_id: the model name sent to the endpoint (default: the task's).
        model_script: scripted answers for the stand-in model (``local_stack.model_endpoint.script``).
        run_dir: the local stack's logs and state.
        output: where the results go (default: ``results/demo-<UTC time>.jsonl``).
        keep_running: on Ctrl-C, leave the stack and the rollouts running (default: cancel them, stop it).
        resume: an interrupted demo's results file: its rows are kept (written again to ``output``, counted and
            grouped) and only the samples it lacks run (the cancelled ones, those still running when it stopped),
            as ``rollouts eval --resume`` does with a journal. The same prompts, samples and seed must be given.
    """

    prompts: int = Field(default=16, ge=1)
    samples_per_prompt: int = Field(default=4, ge=1)
    concurrency: int = Field(default=16, ge=1)
    temperature: float = Field(default=0.8, ge=0)
    timeout_s: float = 120.0
    seed: int = 0
    policy: FailurePolicy = FailurePolicy.DROP_FAILED
    model_url: str | None = None
    model_id: str | None = None
    model_script: PathValue | None = None
    run_dir: PathValue = DEFAULT_RUN_DIR
    output: PathValue | None = None
    keep_running: bool = False
    resume: PathValue | None = None

    @field_validator("timeout_s", mode="before")
    @classmethod
    def _timeout(cls, timeout_s: Any) -> float:
        return validate_timeout_s(timeout_s, "--timeout")

    @field_validator("output")
    @classmethod
    def _output(cls, output: Path | None) -> Path | None:
        if output is not None and not output.parent.is_dir():
            raise ValueError(f"--output {output}: directory {output.parent} does not exist; create it first")
        return output

    @field_validator("resume")
    @classmethod
    def _resume(cls, resume: Path | None) -> Path | None:
        if resume is not None and not resume.is_file():
            raise ValueError(f"--resume {resume}: no such file; give the results file of the demo to resume")
        _carried_rows(resume)  # every line a row, before anything starts
        return resume


@dataclass
class DemoReport:
    """What the demo measured; :meth:`render` prints it."""

    summary: BatchSummary = field(default_factory=lambda: BatchSummary(0))
    groups_kept: int = 0
    groups_dropped: int = 0
    groups_with_signal: int = 0
    traced_rollouts: int = 0
    completion_tokens: int = 0
    sessions_started: int = 0
    sessions_stopped: int = 0
    startup_s: float = 0.0
    total_s: float = 0.0
    output: Path | None = None

    @property
    def by_status(self) -> Counter[str]:
        """Rollouts by terminal status."""
        return self.summary.by_status

    @property
    def rewards(self) -> list[float]:
        """Rewards of the succeeded rollouts."""
        return self.summary.rewards

    @property
    def run_s(self) -> float:
        """Seconds from the first submit to the last result (the client's close is not part of it)."""
        return self.summary.run_s

    def add_item(self, item: BatchItem) -> None:
        """Count one finished rollout's token traces (``summary`` counts the rest)."""
        if item.result is not None and item.result.token_traces:
            self.traced_rollouts += 1
            self.completion_tokens += sum(len(trace.completion_token_ids) for trace in item.result.token_traces)

    def add_group(self, group: RolloutGroup) -> None:
        """Count one complete group the failure policy kept."""
        self.groups_kept += 1
        self.groups_with_signal += any(abs(advantage) > 1e-9 for advantage in group.advantages)

    def render(self, out: TextIO) -> None:
        """Print the summary."""
        lines = [
            "",
            "== demo summary ==",
            *self.summary.lines(with_time=False),
            f"GRPO groups     {self.groups_kept} kept, {self.groups_dropped} dropped, "
            f"{self.groups_with_signal} with non-zero advantages",
            f"token traces    {plural(self.traced_rollouts, 'rollout')} traced, "
            f"{plural(self.completion_tokens, 'completion token')}",
            f"sessions        {self.sessions_started} started, {self.sessions_stopped} stopped",
            f"time            {self.total_s:.1f} s total ({self.startup_s:.1f} s stack start, "
            f"{self.run_s:.1f} s rollouts, {self.summary.done / max(self.run_s, 1e-9):.2f} rollouts/s)",
            f"results         {self.output}",
        ]
        out.write("\n".join(lines) + "\n")


def run_demo(task: DemoTask, settings: DemoSettings, out: TextIO | None = None) -> DemoReport:
    """Run ``task`` end to end and return what it measured (the local stack is stopped on return).

    ``out`` is where the lines go (default: ``sys.stdout`` at the time of the call).

    Raises:
        ModelUnreachableError: ``model_url`` does not answer (checked before anything starts).
        StackRunningError: a local stack already runs from ``run_dir``.
        KeyboardInterrupt: Ctrl-C; the rollouts still running were cancelled and the stack stopped, unless
            ``keep_running`` (then both are left running, recorded for ``rollouts local status|down``).
    """
    out = out if out is not None else sys.stdout
    if settings.model_url is not None:
        check_model_endpoint(settings.model_url)
    report = DemoReport()
    started = time.monotonic()
    output = settings.output or Path("results") / f"demo-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.jsonl"
    output.parent.mkdir(parents=True, exist_ok=True)
    report.output = output
    stack_settings = task.agent.settings(
        run_dir=settings.run_dir,
        experiments=(DEMO_EXPERIMENT,),
        model_base_url=settings.model_url,
        model=EndpointSettings(script=settings.model_script),
        session_budget=settings.concurrency,
    )
    out.write(f"starting the local stack (logs in {settings.run_dir}/) ...\n")
    stack = LocalStack(stack_settings, owner="`rollouts demo`")
    stack.start()
    keep_stack = False
    try:
        report.startup_s = time.monotonic() - started
        prompts = task.dataset(settings.prompts, settings.seed)
        out.write(
            f"stack up in {report.startup_s:.1f} s; running {len(prompts)} prompts x "
            f"{settings.samples_per_prompt} samples\n"
        )
        with environment(stack.env):
            _run_rollouts(task.model_id, prompts, settings, report, output, out)
        report.sessions_started, report.sessions_stopped = _wait_for_stops(stack, report.summary.done)
    except KeyboardInterrupt:
        keep_stack = settings.keep_running
        raise
    finally:
        if not keep_stack:
            stack.stop()
    report.total_s = time.monotonic() - started
    report.render(out)
    for line in report.summary.failure_lines(lambda item: f"prompt {item.index // settings.samples_per_prompt + 1}"):
        out.write(line + "\n")
    return report


def _run_rollouts(
    model_id: str | None,
    prompts: Sequence[tuple[str, Mapping[str, Any]]],
    settings: DemoSettings,
    report: DemoReport,
    output: Path,
    out: TextIO,
) -> None:
    """Run ``prompts`` in GRPO groups into ``report`` and ``output``.

    On Ctrl-C: cancel the rollouts still running (unless ``keep_running``), say so, and re-raise.
    """
    carried = _carried_rows(settings.resume)
    plan = plan_samples(
        [payload for _, payload in prompts],
        [input_id for input_id, _ in prompts],
        settings.samples_per_prompt,
        Counter(item.input_id or "" for item in carried),
    )
    if settings.resume is not None:
        out.write(f"resuming from {settings.resume}: {plural(len(carried), 'rollout')} kept, {len(plan.todo)} to run\n")
    progress = RolloutProgress(plan.total)
    report.summary = progress.summary
    collector = GroupCollector(settings.samples_per_prompt, settings.policy, eps=1e-6)

    def take(item: BatchItem) -> None:
        sink.write(json.dumps(item.to_record()) + "\n")
        report.add_item(item)
        if (group := collector.add(item)) is not None:
            report.add_group(group)
        progress.update(item)

    with (
        RolloutClient.for_experiment(
            DEMO_EXPERIMENT, poll=PollSettings(), sampling_params={"temperature": settings.temperature}
        ) as client,
        output.open("w", encoding="utf-8") as sink,
    ):
        for item in carried:
            take(item)
        items = client.run_batch(
            [payload for _, payload, _ in plan.todo],
            settings.concurrency,
            settings.timeout_s,
            input_ids=[input_id for _, _, input_id in plan.todo],
            rollout_config={"model_id": settings.model_id or model_id},  # None: the experiment's default
        )
        try:
            for item in items:
                take(replace(item, index=plan.todo[item.index][0]))
        except KeyboardInterrupt:
            progress.close()
            if settings.keep_running:
                out.write(
                    f"\ninterrupted; the stack and its {plural(client.pending_count, 'rollout')} still running are "
                    f"left running (`rollouts local status --run-dir {settings.run_dir}`, `rollouts local down`)\n"
                )
            else:
                out.write(f"\ninterrupted; cancelled {plural(client.cancel_pending(), 'rollout')} still running\n")
            for item in items.unfinished():  # a row for every rollout started, the cancelled ones too
                placed = replace(item, index=plan.todo[item.index][0])
                progress.summary.add(placed)
                sink.write(json.dumps(placed.to_record()) + "\n")
            out.write("\n".join(["", "== demo summary (interrupted) ==", *progress.summary.lines(), ""]))
            out.write(f"every rollout started has its row in {output}\n")
            out.write(f"interrupted: to finish, run the same `rollouts demo` command with `--resume {output}`\n")
            raise
    report.groups_dropped = len(prompts) - report.groups_kept
    progress.close()


def _carried_rows(resume: Path | None) -> list[BatchItem]:
    """The rows of an interrupted demo's results file that a resume keeps: every rollout that ended other than
    cancelled (a cancelled one, or one without a result, runs again).

    Raises:
        ValueError: a line is not a results-file row (the message names the file and the line).
    """
    if resume is None:
        return []
    kept = []
    for number, line in enumerate(resume.read_text(encoding="utf-8").splitlines(), start=1):
        try:
            item = BatchItem.from_record(json.loads(line))
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"--resume {resume}, line {number}: not a row of a demo's results ({exc})") from exc
        if item.result is not None and item.result.status is not Status.CANCELLED:
            kept.append(item)
    return kept


class ModelUnreachableError(RuntimeError):
    """The model endpoint given with ``--model-url`` does not answer."""


def check_model_endpoint(base_url: str, timeout_s: float = 5.0) -> None:
    """Ask an OpenAI-compatible endpoint for its models (``GET {base_url}/models``) before rollouts depend on it.

    Raises:
        ModelUnreachableError: no answer, or not a 2xx one (the message says which and what to do).
    """
    url = f"{base_url.rstrip('/')}/models"
    try:
        response = httpx.get(url, timeout=timeout_s, trust_env=False)
    except httpx.HTTPError as exc:
        raise ModelUnreachableError(
            f"the model endpoint does not answer at {url} ({type(exc).__name__}: {exc}); start it, or fix "
            "--model-url (an OpenAI-compatible base URL such as http://host:8000/v1)"
        ) from exc
    if not response.is_success:
        raise ModelUnreachableError(
            f"the model endpoint answered {response.status_code} to GET {url}; --model-url must be an "
            "OpenAI-compatible base URL ending where /models and /chat/completions are (often .../v1)"
        )


def dataset_task(agent: LocalAgent, path: str | os.PathLike[str], model_id: str | None = None) -> DemoTask:
    """A :class:`DemoTask` running ``agent`` on the rows of a JSONL file, in file order (each row a payload).

    A row's input id is its ``input_id`` field, else its ``id``, else ``row-<n>``.

    Raises:
        ValueError: the file cannot be read, a line is not a JSON object, or an id is not key-safe.
    """
    path = Path(os.fspath(path))
    rows: list[tuple[str, Mapping[str, Any]]] = []
    for number, row in enumerate(read_dataset(path), start=1):
        input_id = str(row.get("input_id", row.get("id", f"row-{number}")))
        try:
            rows.append((validate_input_id(input_id), row))
        except InvalidIdError as exc:
            raise ValueError(f"{path}, row {number}: {exc}") from exc
    return DemoTask(
        agent=agent, dataset=lambda count, _seed: rows[:count], model_id=model_id, default_prompts=len(rows)
    )


def _wait_for_stops(stack: LocalStack, expected: int) -> tuple[int, int]:
    """Return the emulator's (sessions started, sessions stopped), once the finisher caught up or time ran out."""
    deadline = time.monotonic() + STOP_WAIT_S
    while True:
        counters = httpx.get(f"{stack.emulator_url}/_admin/stats", timeout=5).json()["counters"]
        if counters["stops"] >= expected or time.monotonic() > deadline:
            return counters["starts"], counters["stops"]
        time.sleep(0.2)
