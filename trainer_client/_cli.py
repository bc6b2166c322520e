"""The ``rollouts`` command: a thin argparse layer over the public ``trainer_client`` API.

- ``rollouts eval EXP --dataset IN.jsonl --output OUT.jsonl``: run every dataset row as a rollout.
- ``rollouts status EXP``: rollouts by state against the budgets, rates, failures, DLQs, alarms;
  ``rollouts top EXP``: the same, refreshed every second.
- ``rollouts results EXP``: export the experiment's stored results as JSONL.
  These three take ``--run RUN``: the rollouts of one run of the experiment (exp_id ``EXP/RUN``).
- ``rollouts dashboard EXP [--port P]``: the CDK dashboard's widgets, drawn from CloudWatch in a local page.
- ``rollouts sessions EXP``: the rollouts in flight; ``rollouts cancel EXP --session ID | --input-id ID | --all``.
- ``rollouts doctor EXP [--canary PAYLOAD.json]``: check every hop, one line each; exit 1 on any failure.
- ``rollouts local ...`` / ``rollouts demo``: the local twin's, mounted through the ``agentcore_rollouts.commands``
  entry point group (this module imports no twin code); they need the ``local`` extra, and say so when it is missing.

For scripts: ``--json`` output, ``--version``, ``-v``/``-q`` on every command (logging level; ``-q`` also drops
progress and summaries), plain progress lines when stderr is not a terminal, and a quiet exit (status 141, as
for a process killed by SIGPIPE) when stdout's reader goes away (``rollouts results EXP | head -1``).

Every subcommand's parser sets ``func(args) -> int | None``; ``main`` calls it.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from botocore.exceptions import EndpointConnectionError, NoCredentialsError, NoRegionError

from rollout_contract import InvalidIdError, Status
from rollout_contract.aws import ClientFactory, new_session
from rollout_contract.messages import DEFAULT_QUEUE_TIMEOUT_S, validate_timeout_s
from trainer_client._aws import load_descriptor
from trainer_client._client import RolloutClient
from trainer_client._config import DEFAULT_ROLLOUT_TIMEOUT_S, PollSettings
from trainer_client._dataset import json_object, read_dataset
from trainer_client._eval import EvalInterrupted, plan_eval, row_input_id, run_eval
from trainer_client._exceptions import RolloutError
from trainer_client._operate import cancel_rollouts, print_sessions
from trainer_client._top import Watch, render
from trainer_client._words import plural
from trainer_client.doctor import run_doctor

__all__ = ["build_parser", "main"]

#: Top-level modules of the optional extras, so that a command that needs a missing one names what to install.
_EXTRA_OF_MODULE = {
    "starlette": "local",
    "uvicorn": "local",
    "moto": "local",
    "rllm_model_gateway": "local",
    "aws_lambda_powertools": "lambdas",
    "bedrock_agentcore": "agent",
    "strands": "examples",
    "aws_cdk": "infra",
}
_LOCAL_HINT = 'for the local stack, run `eval "$(rollouts local status --env)"` in this shell first'
#: Exit status after stdout's reader went away: what a shell reports for a process killed by SIGPIPE.
EXIT_BROKEN_PIPE = 141


class UsageError(Exception):
    """The command line or an input file is wrong; the message says how to fix it."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``rollouts`` command; return its exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "func"):
        parser.print_help(sys.stderr)
        return 2
    _configure_logging(args.verbose, args.quiet)
    try:
        return _run(parser, args)
    except BrokenPipeError:
        # The reader went away (`| head -1`): later writes, and the flush at exit, go nowhere instead of failing.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


def _run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    try:
        return args.func(args) or 0
    except UsageError as exc:
        # The command's own usage (`rollouts eval: error: ...`), not the top-level one.
        command: argparse.ArgumentParser = getattr(args, "command_parser", parser)
        command.error(str(exc))
    except (RolloutError, InvalidIdError) as exc:
        print(f"rollouts: error: {exc}", file=sys.stderr)
        return 1
    except NoRegionError:
        print(
            f"rollouts: error: no AWS region: pass --region or set AWS_DEFAULT_REGION; {_LOCAL_HINT}", file=sys.stderr
        )
        return 1
    except NoCredentialsError:
        print(
            f"rollouts: error: no AWS credentials: configure a profile or AWS_* variables; {_LOCAL_HINT}",
            file=sys.stderr,
        )
        return 1
    except EndpointConnectionError as exc:
        print(f"rollouts: error: {exc}; for the local stack, check it runs (`rollouts local status`)", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("rollouts: interrupted", file=sys.stderr)
        return 130
    except ModuleNotFoundError as exc:
        module = (exc.name or "").partition(".")[0]
        extra = _EXTRA_OF_MODULE.get(module)
        if extra is None:
            raise
        print(
            f"rollouts: error: this command needs {module!r}, from the {extra!r} extra: "
            f"pip install 'agentcore-rollouts[{extra}]'",
            file=sys.stderr,
        )
        return 1


class _StderrHandler(logging.Handler):
    """Write records to whatever ``sys.stderr`` is when they are emitted."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            print(self.format(record), file=sys.stderr)
        except Exception:  # noqa: BLE001 - logging's own rule: a failing handler reports and goes on
            self.handleError(record)


def _configure_logging(verbose: int, quiet: bool) -> None:
    """Log WARNING and above to stderr; INFO with ``-v``, DEBUG with ``-vv``, only ERROR with ``-q``."""
    level = logging.ERROR if quiet else {0: logging.WARNING, 1: logging.INFO}.get(verbose, logging.DEBUG)
    root = logging.getLogger()
    handler = next((h for h in root.handlers if isinstance(h, _StderrHandler)), None)
    if handler is None:
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
    handler.setLevel(level)  # records of loggers with their own level (a library's) stop here too
    root.setLevel(level)


def build_parser() -> argparse.ArgumentParser:
    """Build the argument parser, with the commands mounted from the ``agentcore_rollouts.commands`` group."""
    parser = argparse.ArgumentParser(prog="rollouts", description="Run and inspect RL rollouts on AgentCore Runtime.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")

    run = commands.add_parser("eval", help="run a dataset (JSONL, one payload per line) and write results as JSONL")
    _add_experiment(run)
    run.add_argument("--dataset", required=True, type=Path, help="input JSONL: one JSON object (payload) per line")
    run.add_argument("--output", required=True, type=Path, help="output JSONL: one result per line")
    run.add_argument("--concurrency", type=_positive_int, default=32, help="rollouts in flight at most (32)")
    run.add_argument(
        "--timeout", type=_positive_float, default=DEFAULT_ROLLOUT_TIMEOUT_S, help="seconds per rollout (900)"
    )
    run.add_argument(
        "--queue-timeout",
        type=_positive_float,
        default=DEFAULT_QUEUE_TIMEOUT_S,
        help="seconds a rollout may wait for capacity before it starts (3600); --timeout runs from the start",
    )
    run.add_argument("--samples", type=_positive_int, default=1, help="rollouts per row, grouped by input id (1)")
    run.add_argument(
        "--input-id-field", help="take each row's input id from this field (default: row-<n>-<digest of the row>)"
    )
    model = run.add_argument_group("the model the agents call (_rollout fields)")
    model.add_argument("--model-id", help="_rollout.model_id for every rollout (default: the experiment's)")
    model.add_argument("--base-url", help="_rollout.base_url: an OpenAI-compatible endpoint (http://host:port/v1)")
    model.add_argument("--temperature", type=float, help="sampling_params.temperature")
    model.add_argument(
        "--sampling-param",
        action="append",
        default=[],
        metavar="K=V",
        type=_key_value,
        help="one more sampling_params entry (repeatable; V is read as JSON when it parses: 0.9, 256, true)",
    )
    resume = run.add_mutually_exclusive_group()
    resume.add_argument(
        "--journal", type=Path, help="record every submitted rollout here, for --resume (default: OUTPUT.journal)"
    )
    resume.add_argument(
        "--resume",
        type=Path,
        metavar="JOURNAL",
        help="an earlier run's --journal: collect its rollouts, submit only the samples it lacks, keep recording",
    )
    run.add_argument(
        "--keep-running", action="store_true", help="on Ctrl-C, leave the rollouts running (default: cancel them)"
    )
    run.add_argument("--json", action="store_true", help="print the summary as one JSON object on stdout")
    run.set_defaults(func=_eval)

    status = commands.add_parser(
        "status", help="one view of a run: rollouts by state against the budgets, rates, failures, DLQs, alarms"
    )
    _add_experiment(status)
    status.add_argument("--json", action="store_true", help="print it as one JSON object")
    status.set_defaults(func=_status)

    top = commands.add_parser("top", help="the status view, refreshed every second (Ctrl-C to leave)")
    _add_experiment(top)
    top.add_argument("--interval", type=_positive_float, default=1.0, help="seconds between refreshes (1)")
    top.add_argument("--once", action="store_true", help="one refresh, then exit (as rollouts status)")
    top.add_argument("--json", action="store_true", help="one JSON object per refresh (JSONL)")
    top.set_defaults(func=_top)

    dashboard = commands.add_parser(
        "dashboard", help="serve the experiment's CloudWatch dashboard as a local page on 127.0.0.1 (Ctrl-C to stop)"
    )
    _add_experiment(dashboard)
    dashboard.add_argument("--port", type=int, default=8765, help="port on 127.0.0.1 (8765; 0: any free port)")
    dashboard.set_defaults(func=_dashboard)

    sessions = commands.add_parser(
        "sessions", help="rollouts in flight: session id, input id, state, age, deadline (every trainer's)"
    )
    _add_experiment(sessions)
    sessions.add_argument(
        "--queued", action="store_true", help="add the rollouts waiting for capacity (scans the sessions table)"
    )
    sessions.add_argument("--json", action="store_true", help="one JSON object per rollout (JSONL)")
    sessions.set_defaults(func=_sessions)

    cancel = commands.add_parser(
        "cancel", help="cancel rollouts in flight (each ends as cancelled, its session stopped), any trainer's"
    )
    _add_experiment(cancel)
    which = cancel.add_mutually_exclusive_group(required=True)
    which.add_argument("--session", action="append", metavar="ID", help="this rollout (repeatable)")
    which.add_argument("--input-id", metavar="ID", help="every rollout of this input id (group) not ended")
    which.add_argument("--all", action="store_true", help="every rollout not ended, queued ones included")
    cancel.add_argument(
        "--wait",
        type=float,
        default=5.0,
        metavar="S",
        help="seconds to wait for the cancelled rollouts' results, to say how each ended (5; 0: do not wait)",
    )
    cancel.set_defaults(func=_cancel)

    results = commands.add_parser("results", help="list an experiment's stored results, or export them as JSONL")
    _add_experiment(results)
    results.add_argument("--output", type=Path, help="write every result as JSONL to this file")
    results.add_argument("--status", action="append", choices=[s.value for s in Status], help="only this status")
    results.add_argument("--json", action="store_true", help="every result as JSONL on stdout (default: one line each)")
    results.set_defaults(func=_results)

    doctor = commands.add_parser(
        "doctor", help="check every hop of an experiment (one line each) and optionally trace a canary rollout"
    )
    doctor.add_argument("experiment", help="experiment id (its descriptor is read from SSM)")
    doctor.add_argument("--region", help="AWS region (default: boto3's)")
    doctor.add_argument("--canary", type=Path, metavar="PAYLOAD_FILE", help="run one rollout of this JSON payload")
    doctor.add_argument("--input-id", help="the canary's input id (default: its session id)")
    doctor.add_argument("--model-id", help="the canary's _rollout.model_id")
    doctor.add_argument("--timeout", type=_positive_float, default=120.0, help="the canary's deadline in seconds (120)")
    doctor.add_argument("--json", action="store_true", help="one JSON object per check (JSONL) instead of a line")
    doctor.set_defaults(func=_doctor)

    preflight = commands.add_parser(
        "preflight",
        help="before the first deploy, with the deploying credentials: what the deploy would fail on (one line each)",
    )
    preflight.add_argument("--region", help="the region to deploy to (default: boto3's)")
    preflight.add_argument("--image-tag", help="the -c image_tag to deploy (checked in ECR for arm64)")
    preflight.add_argument("--session-budget", type=int, help="the -c session_budget to deploy (default: the stack's)")
    preflight.add_argument(
        "--tps-limit", type=_positive_float, help="the -c tps_limit to deploy (default: the stack's)"
    )
    preflight.add_argument(
        "--endpoints", type=_positive_int, help="the -c endpoints=K to deploy: what K buys under the invoke quota (1)"
    )
    preflight.set_defaults(func=_preflight)

    _mount_commands(commands)
    for command in dict.fromkeys(commands.choices.values()):
        command.set_defaults(command_parser=command)
    _add_verbosity(parser, top=True)
    return parser


def _add_verbosity(parser: argparse.ArgumentParser, *, top: bool = False) -> None:
    """``-v``/``-q`` on ``parser`` and every subcommand below it (before or after the command name)."""
    # Below the top, a flag left out must not overwrite one given before the command name.
    verbose, quiet = (0, False) if top else (argparse.SUPPRESS, argparse.SUPPRESS)
    parser.add_argument("-v", "--verbose", action="count", default=verbose, help="log more (-v INFO, -vv DEBUG)")
    parser.add_argument("-q", "--quiet", action="store_true", default=quiet, help="errors only: no progress or summary")
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                _add_verbosity(child)


def _version() -> str:
    try:
        return importlib.metadata.version("agentcore-rollouts")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


#: The entry point group through which other parts of the distribution add commands (the local twin's
#: ``local`` and ``demo``), so that this SDK imports none of them.
COMMANDS_GROUP = "agentcore_rollouts.commands"


def _mount_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for entry in importlib.metadata.entry_points(group=COMMANDS_GROUP):
        entry.load()(commands)


def _add_experiment(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("experiment", help="experiment id (its descriptor is read from SSM)")
    parser.add_argument(
        "--run", help="a run of the experiment: its rollouts go under EXP/RUN/ (a free label; default: no run)"
    )
    parser.add_argument("--region", help="AWS region (default: boto3's)")
    parser.add_argument("--poll-wait", type=int, default=20, help=argparse.SUPPRESS)


def _connect(args: argparse.Namespace, **options: Any) -> RolloutClient:
    return RolloutClient.for_experiment(
        args.experiment, run=args.run, region=args.region, poll=PollSettings(wait_time_s=args.poll_wait), **options
    )


def _eval(args: argparse.Namespace) -> int:
    rows = _usage(read_dataset, args.dataset)
    for path, what in ((args.output, "output"), (args.journal or args.resume, "journal")):
        if path is not None and not path.parent.is_dir():
            raise UsageError(f"{what} {path}: directory {path.parent} does not exist; create it or choose another path")
    if args.resume is not None and not args.resume.is_file():
        raise UsageError(f"--resume {args.resume}: no such journal; give the --journal of the run to resume")
    try:
        plan = plan_eval(rows, _input_ids(rows, args.input_id_field), args.samples, args.resume)
    except ValueError as exc:
        raise UsageError(f"--resume {args.resume}: {exc}") from exc
    if args.resume is not None and not args.quiet:
        print(
            f"resuming from {args.resume}: {plural(plan.resumed, 'rollout')} recorded there, {len(plan.todo)} to submit"
            + (f"; {plan.strangers} recorded for rows this dataset lacks (collected too)" if plan.strangers else ""),
            file=sys.stderr,
        )
    journal = args.journal or args.resume or args.output.with_name(args.output.name + ".journal")
    interrupted = False
    with _connect(args, queue_timeout=args.queue_timeout) as client:
        try:
            progress = run_eval(
                client,
                plan,
                resume=args.resume,
                journal=journal,
                output=args.output,
                concurrency=args.concurrency,
                timeout=args.timeout,
                overrides=_rollout_overrides(args),
                progress_mode="off" if args.quiet else "auto",  # on stderr: --json's stdout stays one object
                keep_running=args.keep_running,
            )
        except EvalInterrupted as stop:
            progress, interrupted = stop.progress, True
    summary = progress.summary
    if args.json:
        print(json.dumps({**summary.as_dict(), "output": str(args.output), "interrupted": interrupted}))
    elif not args.quiet:
        print("\n".join(summary.lines()), file=sys.stderr)
    if summary.failed:
        for line in summary.failure_lines(lambda item: f"row {item.index // args.samples + 1}"):
            print(line, file=sys.stderr)
    if summary.failed or interrupted:
        print(f"every rollout started has its row in {args.output}, failures included", file=sys.stderr)
    if interrupted:
        again = f"rollouts eval {args.experiment} --dataset {args.dataset} --output {args.output} --resume {journal}"
        print(f"interrupted: to finish the dataset, run `{again}`", file=sys.stderr)
        return 130
    return 0 if summary.failed == 0 else 1


def _rollout_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The ``_rollout`` fields eval's model options set."""
    sampling = dict(args.sampling_param)
    if args.temperature is not None:
        sampling["temperature"] = args.temperature
    fields = {"model_id": args.model_id, "base_url": args.base_url, "sampling_params": sampling or None}
    return {name: value for name, value in fields.items() if value is not None}


def _usage(read: Callable[..., Any], *args: Any) -> Any:
    """``read(*args)``, its ``ValueError`` (a bad input file) as a :class:`UsageError`."""
    try:
        return read(*args)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


def _input_ids(rows: list[dict[str, Any]], field: str | None) -> list[str]:
    """Each row's input id: its ``field`` (``--input-id-field``), or one made from its position and content."""
    if field is None:
        return [row_input_id(number, row) for number, row in enumerate(rows, start=1)]
    ids = []
    for number, row in enumerate(rows, start=1):
        if field not in row:
            raise UsageError(f"dataset row {number} has no field {field!r} (given by --input-id-field)")
        ids.append(str(row[field]))
    return ids


def _status(args: argparse.Namespace) -> int:
    args.once, args.interval = True, 0.0
    return _top(args)


def _top(args: argparse.Namespace) -> int:
    watch = Watch(load_descriptor(args.experiment, region=args.region), run=args.run)
    live = not args.once and not args.json and sys.stdout.isatty()
    try:
        while True:
            snapshot = watch.snapshot()
            if args.json:
                print(json.dumps(snapshot.as_dict()), flush=True)
            else:
                print("\x1b[H\x1b[2J" if live else "", end="")
                render(snapshot, sys.stdout)
                sys.stdout.flush()
            if args.once:
                return 0
            time.sleep(max(0.0, snapshot.at + args.interval - time.time()))
    except KeyboardInterrupt:
        return 0


def _dashboard(args: argparse.Namespace) -> int:
    from trainer_client._dashboard import DashboardReader, experiment_started_at, server

    descriptor = load_descriptor(args.experiment, region=args.region)
    factory = ClientFactory(region=descriptor.region, endpoints=descriptor.endpoints)
    started_at = experiment_started_at(factory.client("sqs"), descriptor)
    reader = DashboardReader(descriptor, factory.client("cloudwatch"), run=args.run, started_at=started_at)
    try:
        serving = server(reader, args.port)
    except OSError as exc:
        raise UsageError(
            f"cannot serve on 127.0.0.1:{args.port} ({exc.strerror}): pass another --port, or --port 0 for any free one"
        ) from exc
    with serving:
        print(f"dashboard of {reader.title} at http://127.0.0.1:{serving.server_address[1]}/ (Ctrl-C to stop)")
        sys.stdout.flush()
        try:
            serving.serve_forever()
        except KeyboardInterrupt:
            pass
    return 0


def _sessions(args: argparse.Namespace) -> int:
    with _connect(args) as client:
        view = client.in_flight(queued=args.queued)
    print_sessions(view.in_flight, as_json=args.json, out=sys.stdout, ended=view.ended)
    return 0


def _cancel(args: argparse.Namespace) -> int:
    with _connect(args) as client:
        return cancel_rollouts(
            client,
            session_ids=args.session or (),
            input_id=args.input_id,
            everything=args.all,
            out=sys.stdout,
            wait_s=args.wait,
        )


def _doctor(args: argparse.Namespace) -> int:
    canary = None
    if args.canary is not None:
        try:
            text = args.canary.read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot read canary payload {args.canary}: {exc.strerror}") from exc
        canary = _usage(json_object, text, f"canary payload {args.canary}", "give one JSON object")
    healthy = run_doctor(
        args.experiment,
        region=args.region,
        canary=canary,
        input_id=args.input_id,
        timeout_s=args.timeout,
        model_id=args.model_id,
        out=sys.stdout,
        as_json=args.json,
    )
    return 0 if healthy else 1


def _preflight(args: argparse.Namespace) -> int:
    # The deploy-side checks need the CDK app's pins (a repository checkout with `make install`).
    from infra.preflight import run_preflight

    region = args.region or new_session().region_name
    if not region:
        raise UsageError("no AWS region: pass --region or set AWS_REGION (the region `npx cdk deploy` will use)")
    budgets = {"session_budget": args.session_budget, "tps_limit": args.tps_limit, "endpoints": args.endpoints}
    options = {name: value for name, value in budgets.items() if value is not None}
    return 0 if run_preflight(region, image_tag=args.image_tag, out=sys.stdout, **options) else 1


def _results(args: argparse.Namespace) -> int:
    with _connect(args) as client:
        results = client.results(args.status)
        if args.output is not None:
            with args.output.open("w", encoding="utf-8") as out:
                for result in results:
                    out.write(json.dumps(result) + "\n")
            return 0
        for result in results:
            if args.json:
                print(json.dumps(result))
            else:
                reward = "-" if result.reward is None else f"{result.reward:g}"
                print(f"{result.status.value:<16} reward={reward:<8} {result.result_key}")
    return 0


def _key_value(text: str) -> tuple[str, Any]:
    """``K=V`` -> ``(K, V)``, V read as JSON when it parses (``0.9``, ``256``, ``true``), else the string."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def _positive_float(text: str) -> float:
    try:
        return validate_timeout_s(float(text), "the value")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"must be a finite positive number, got {text}") from exc
