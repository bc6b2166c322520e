"""``rollouts local up|down|status`` and ``rollouts demo``: the local stack as detached processes; the demo.

``up`` starts the stack (see :mod:`local_stack.stack`) and returns, leaving the processes running;
``down`` stops them; ``status`` says which are alive and, with ``--env``, prints the ``export`` lines a
trainer shell needs; ``demo`` runs :mod:`local_stack.demo`. One stack per run directory
(:mod:`local_stack.run_dir`): ``up`` and ``demo`` refuse, saying where the running one is, and both are
recorded in ``state.json`` while they run. The caller gives the agent and the demo's dataset
(a :class:`~local_stack.hosting.DemoTask`; ``up`` hosts its agent); ``--agent TARGET`` hosts the user's own
instead (:mod:`local_stack.agent_target`), checked before anything starts, and ``demo --dataset FILE`` runs
a JSONL file. Heavy imports happen inside the commands, so mounting them costs nothing.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from local_stack.hosting import DemoTask, LocalAgent
from local_stack.run_dir import STATE_FILE, StackRunningError, alive, describe_running, read_state, running_state
from rollout_contract.protocol import MAX_RUNTIME_ENDPOINTS

__all__ = ["add_commands"]

_DEFAULT_RUN_DIR = Path(".local-stack")


def add_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], demo: DemoTask) -> None:
    """Add ``local up|down|status`` and ``demo`` to the ``rollouts`` parser's subcommands.

    ``demo`` is what ``rollouts demo`` runs; ``rollouts local up`` hosts its agent.
    """
    _add_demo(subparsers, demo)
    local = subparsers.add_parser("local", help="run the whole pipeline on this machine (no AWS account)")
    actions = local.add_subparsers(title="actions", metavar="ACTION")
    local.set_defaults(func=lambda _args: _print_help(local))

    up = actions.add_parser("up", help="start the local stack in the background")
    _add_run_dir(up)
    up.add_argument("--exp", action="append", help="experiment id to provision (repeatable; default: demo)")
    up.add_argument(
        "--runtime-arn",
        help="the runtime's ARN (one --exp): a runtime of your own naming, as `cdk deploy -c runtime_arn=...` adopts "
        "one in AWS (default: arn:...:runtime/<agent>-<exp>)",
    )
    up.add_argument("--model-url", help="use this OpenAI-compatible endpoint (http://host:port/v1), not the stand-in")
    up.add_argument(
        "--model-id",
        help="the model name trainers that name none send (default: the stand-in's; none with --model-url)",
    )
    up.add_argument("--no-gateway", action="store_true", help="do not put the token gateway in front of the model")
    up.add_argument("--no-workers", action="store_true", help="run no Lambda workers (run the handlers yourself)")
    up.add_argument(
        "--policy",
        choices=("stand-in", "transformer"),
        default="stand-in",
        help="the local model: the scripted stand-in (default) or the tiny PyTorch transformer (needs `make ml-env`; "
        "run .venv-ml/bin/rollouts)",
    )
    up.add_argument(
        "--tinker",
        action="store_true",
        help="also serve the Tinker API (training and sampling through the tinker SDK) on the tiny transformer "
        "policy; implies --policy transformer (needs `make ml-env`); `local status --env` exports TINKER_BASE_URL",
    )
    up.add_argument("--latency", type=float, default=0.0, help="local model: simulated seconds per call (0)")
    up.add_argument("--seed", type=int, default=0, help="local model: seed (0; the transformer's initialization too)")
    _add_agent_options(up)
    up.add_argument(
        "--dispatcher-environments", type=int, default=2, help="dispatcher worker processes per experiment (2)"
    )
    up.add_argument(
        "--finisher-environments",
        type=int,
        help="finisher worker processes per experiment (default: five, the batches Lambda runs at once from the start)",
    )
    up.add_argument("--sweep-interval", type=float, default=5.0, help="seconds between sweeper runs (5)")
    quota = up.add_argument_group("quotas (ACR's defaults unless given)")
    quota.add_argument(
        "--invoke-tps", type=float, help="emulator: invokes (and stops) per second per endpoint; dispatchers budget it"
    )
    quota.add_argument(
        "--endpoints",
        type=int,
        default=1,
        choices=range(1, MAX_RUNTIME_ENDPOINTS + 1),
        metavar="K",
        help="endpoints of each runtime (1-10), each with its own invoke rate; invokes go where a token is soonest",
    )
    quota.add_argument(
        "--max-sessions", type=int, help="emulator: active sessions at most; the dispatchers' session budget too"
    )
    quota.add_argument(
        "--tps-limit", type=float, help="dispatchers' invoke budget if not --invoke-tps (to test a mismatch)"
    )
    quota.add_argument("--session-budget", type=int, help="dispatchers' session budget if not --max-sessions")
    up.set_defaults(func=_up, agent=demo.agent)

    down = actions.add_parser("down", help="stop the local stack")
    _add_run_dir(down)
    down.set_defaults(func=_down)

    status = actions.add_parser("status", help="show the local stack's processes and URLs")
    _add_run_dir(status)
    status.add_argument("--env", action="store_true", help="print only the shell exports a trainer needs")
    status.set_defaults(func=_status)


def _add_demo(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], task: DemoTask) -> None:
    demo = subparsers.add_parser(
        "demo", help=f"bring the local stack up, run {task.agent.name} in GRPO groups, summarize, shut down"
    )
    demo.add_argument("--prompts", type=int, help="dataset prompts (16; with --dataset, every row)")
    demo.add_argument("--samples", type=int, default=4, help="samples per prompt, the GRPO group size (4)")
    demo.add_argument("--concurrency", type=int, default=16, help="rollouts in flight at most (16)")
    demo.add_argument("--temperature", type=float, default=0.8, help="sampling temperature (0.8)")
    demo.add_argument("--timeout", type=float, default=120.0, help="seconds each rollout may take (120)")
    demo.add_argument("--seed", type=int, default=0, help="dataset seed (0)")
    demo.add_argument("--model-url", help="use this OpenAI-compatible endpoint (http://host:port/v1), not the stand-in")
    demo.add_argument("--model-id", default=task.model_id, help=f"model name sent to the endpoint ({task.model_id})")
    demo.add_argument("--output", type=Path, help="results JSONL (default: results/demo-<time>.jsonl)")
    demo.add_argument(
        "--dataset", type=Path, help="JSONL of payloads to run instead (input id from each row's input_id or id)"
    )
    demo.add_argument(
        "--keep-running",
        action="store_true",
        help="on Ctrl-C, leave the stack and its rollouts running (default: cancel them and stop the stack)",
    )
    demo.add_argument(
        "--resume",
        type=Path,
        metavar="RESULTS",
        help="an interrupted demo's results file: keep its rows, run only the samples it lacks (same options)",
    )
    _add_agent_options(demo)
    _add_run_dir(demo)
    demo.set_defaults(func=_demo, task=task)


def _add_agent_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("your own agent (instead of the example math agent)")
    group.add_argument(
        "--agent",
        dest="agent_target",
        metavar="TARGET",
        help="an agent written for ACR: FILE[:NAME] or MODULE:NAME (an AgentCoreRLApp, or a BedrockAgentCoreApp "
        "with @app.entrypoint)",
    )
    group.add_argument(
        "--agent-env", action="append", metavar="NAME=VALUE", help="an environment variable for its sessions"
    )
    group.add_argument("--agent-name", help="its runtime name (default: the file's folder or the module)")
    group.add_argument(
        "--agent-workdir", type=Path, help="where its sessions start (default: the file's folder, or here)"
    )
    group.add_argument(
        "--agent-start-timeout",
        type=float,
        default=60.0,
        help="seconds it may take to answer /ping when checked before the stack starts (60, ACR's limit)",
    )
    group.add_argument(
        "--model-script",
        type=Path,
        help="scripted answers for the stand-in model (JSON, local_stack.model_endpoint.script)",
    )


def _hosted_agent(args: argparse.Namespace, default: LocalAgent, command: str) -> LocalAgent | None:
    """The agent to host: ``default``, or ``--agent TARGET`` once it answered ``/ping``; ``None`` after an error."""
    from local_stack.agent_target import AgentStartError, AgentTargetError, check_agent, parse_env, target_agent

    own = ("--agent-env", args.agent_env), ("--agent-name", args.agent_name), ("--agent-workdir", args.agent_workdir)
    if args.agent_target is None:
        given = [flag for flag, value in own if value is not None]
        if given:
            print(f"{command}: {', '.join(given)} need --agent TARGET", file=sys.stderr)
            return None
        return default
    try:
        agent = target_agent(
            args.agent_target,
            name=args.agent_name,
            working_dir=args.agent_workdir,
            environment=parse_env(args.agent_env),
        )
        print(f"checking the agent {args.agent_target} (its import and /ping) ...", file=sys.stderr)
        check_agent(agent, run_dir=args.run_dir, timeout_s=args.agent_start_timeout)
    except (AgentTargetError, AgentStartError, ValueError) as exc:
        print(f"{command}: {exc}\nnothing was started.", file=sys.stderr)
        return None
    return agent


def _demo(args: argparse.Namespace) -> int:
    from local_stack.demo import DemoSettings, ModelUnreachableError, dataset_task, run_demo

    if _refuse_running(args.run_dir, "rollouts demo") or not _run_dir_usable(args.run_dir, "rollouts demo"):
        return 1
    if args.agent_target is not None and args.dataset is None:
        print(
            "rollouts demo: --agent needs --dataset FILE: the example's dataset is for the example agent",
            file=sys.stderr,
        )
        return 2
    task = args.task
    agent = _hosted_agent(args, task.agent, "rollouts demo")
    if agent is None:
        return 1
    try:
        if args.dataset is not None:
            task = dataset_task(agent, args.dataset)
        settings = DemoSettings(
            prompts=args.prompts if args.prompts is not None else task.default_prompts,
            samples_per_prompt=args.samples,
            concurrency=args.concurrency,
            temperature=args.temperature,
            timeout_s=args.timeout,
            seed=args.seed,
            model_url=args.model_url,
            model_id=args.model_id,
            model_script=args.model_script,
            run_dir=args.run_dir,
            output=args.output,
            keep_running=args.keep_running,
            resume=args.resume,
        )
    except ValueError as exc:
        print(f"rollouts demo: {exc}", file=sys.stderr)
        return 2
    try:
        report = run_demo(task, settings)
    except (StackRunningError, ModelUnreachableError) as exc:
        print(f"rollouts demo: {exc}", file=sys.stderr)
        return 1
    return 0 if report.by_status.get("succeeded", 0) > 0 else 1


def _print_help(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def _add_run_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--run-dir", type=Path, default=_DEFAULT_RUN_DIR, help="logs and state.json (default: .local-stack)"
    )


def _refuse_running(run_dir: Path, command: str) -> bool:
    """Say so and return True when a stack recorded in ``run_dir`` runs (before an agent check spends time)."""
    state = running_state(run_dir)
    if state is not None:
        print(f"{command}: {describe_running(run_dir.resolve(), state)}", file=sys.stderr)
    return state is not None


def _run_dir_usable(run_dir: Path, command: str) -> bool:
    """Create ``run_dir`` if needed; say so in one line and return False when it cannot be used."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe = run_dir / ".write-test"
        probe.touch()
        probe.unlink()
    except OSError as exc:
        print(f"{command}: cannot use --run-dir {run_dir} ({exc.strerror}); choose a writable one", file=sys.stderr)
        return False
    return True


def _up(args: argparse.Namespace) -> int:
    from local_stack.demo import ModelUnreachableError, check_model_endpoint
    from local_stack.model_endpoint import EndpointSettings
    from local_stack.stack import LocalStack

    if _refuse_running(args.run_dir, "rollouts local up") or not _run_dir_usable(args.run_dir, "rollouts local up"):
        return 1
    agent = _hosted_agent(args, args.agent, "rollouts local up")
    if agent is None:
        return 1
    experiments = tuple(args.exp or ("demo",))
    if args.runtime_arn is not None and len(experiments) != 1:
        print("rollouts local up: --runtime-arn names the runtime of one experiment; give one --exp", file=sys.stderr)
        return 2
    try:
        settings = agent.settings(
            run_dir=args.run_dir,
            experiments=experiments,
            runtime_arns={experiments[0]: args.runtime_arn} if args.runtime_arn else {},
            model_base_url=args.model_url,
            model_id=args.model_id,
            model=EndpointSettings(
                seed=args.seed,
                latency_s=args.latency,
                policy="transformer" if args.tinker else args.policy,
                script=args.model_script,
                tinker=args.tinker,
            ),
            gateway=not args.no_gateway,
            workers=not args.no_workers,
            dispatcher_environments=args.dispatcher_environments,
            **({} if args.finisher_environments is None else {"finisher_environments": args.finisher_environments}),
            sweep_interval_s=args.sweep_interval,
            endpoints=args.endpoints,
            **quota_settings(
                invoke_tps=args.invoke_tps,
                max_sessions=args.max_sessions,
                tps_limit=args.tps_limit,
                session_budget=args.session_budget,
            ),
        )
    except ValueError as exc:
        print(f"rollouts local up: {exc}", file=sys.stderr)
        return 2
    try:
        if args.model_url is not None:
            check_model_endpoint(args.model_url)
        stack = LocalStack(settings, owner="`rollouts local up`")
        stack.start()
    except (StackRunningError, ModelUnreachableError) as exc:
        print(f"rollouts local up: {exc}", file=sys.stderr)
        return 1
    _print_state(stack.state())
    return 0


def quota_settings(
    *,
    invoke_tps: float | None = None,
    max_sessions: int | None = None,
    tps_limit: float | None = None,
    session_budget: int | None = None,
) -> dict[str, Any]:
    """``StackSettings`` fields for the emulator's quotas and the dispatchers' budgets (these follow the quotas).

    Raises:
        ValueError: a value that is not positive.
    """
    for name, value in (
        ("--invoke-tps", invoke_tps),
        ("--max-sessions", max_sessions),
        ("--tps-limit", tps_limit),
        ("--session-budget", session_budget),
    ):
        if value is not None and not value > 0:
            raise ValueError(f"{name} must be positive, got {value}")
    runtime: dict[str, Any] = {}
    emulator: dict[str, Any] = {}
    if invoke_tps is not None:
        runtime["invoke_tps"] = invoke_tps
    if max_sessions is not None:
        emulator["max_active_sessions"] = max_sessions
    return {
        "runtime_options": runtime,
        "emulator_options": emulator,
        "tps_limit": tps_limit if tps_limit is not None else invoke_tps,
        "session_budget": session_budget if session_budget is not None else max_sessions,
    }


def _down(args: argparse.Namespace) -> int:
    from local_stack._process import stop_pid

    state = read_state(args.run_dir)
    if state is None:
        print(f"no local stack recorded in {args.run_dir}", file=sys.stderr)
        return 0
    for process in reversed(state["processes"]):
        if alive(process):
            stop_pid(process["pid"])
            print(f"stopped {process['name']} (pid {process['pid']})")
    (args.run_dir / STATE_FILE).unlink()
    return 0


def _status(args: argparse.Namespace) -> int:
    state = read_state(args.run_dir)
    if state is None:
        print(f"no local stack recorded in {args.run_dir}; start one with `rollouts local up`", file=sys.stderr)
        return 1
    if args.env:
        for name, value in sorted(state["env"].items()):
            print(f"export {name}={shlex.quote(value)}")
        return 0
    return _print_state(state)


def _print_state(state: dict[str, Any]) -> int:
    dead = 0
    for process in state["processes"]:
        running = alive(process)
        dead += not running
        url = process.get("url") or "-"
        print(
            f"{process['name']:<24} pid {process['pid']:<8} {'alive' if running else 'DEAD':<6} {url}  {process['log']}"
        )
    for name, url in state["urls"].items():
        print(f"{name} url: {url or '-'}")
    print(f"experiments: {', '.join(state['experiments'])}")
    if state.get("started_at"):
        started = datetime.fromtimestamp(state["started_at"], UTC)
        print(f"started by {state.get('owner') or '-'} at {started:%Y-%m-%d %H:%M:%S} UTC")
    return 1 if dead else 0
