"""Command line: ``python -m local_stack.acr_emulator {serve,sessions,stats}``."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time

import httpx

from local_stack.acr_emulator.config import ConfigError, load_config
from local_stack.acr_emulator.server import serve

_SESSION_COLUMNS = ("session_id", "runtime_arn", "state", "pid", "port", "age_s", "last_ping_status", "last_ping_at")


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; return the exit code."""
    parser = argparse.ArgumentParser(prog="acr-emulator", description="Local AgentCore Runtime emulator.")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("serve", help="run the emulator until SIGINT/SIGTERM")
    run.add_argument("--config", required=True, help="JSON config file (see the package docstring)")
    run.add_argument("--host", default="127.0.0.1")
    run.add_argument("--port", type=int, default=0, help="0 lets the OS choose; the URL is printed on stdout")
    run.add_argument("--log-level", default="WARNING")
    for name, text in (("sessions", "print live and recently ended sessions"), ("stats", "print the counters")):
        view = commands.add_parser(name, help=text)
        view.add_argument("--url", required=True, help="the emulator's base URL, e.g. http://127.0.0.1:8790")
    args = parser.parse_args(argv)

    if args.command == "serve":
        return _serve(args)
    try:
        response = httpx.get(f"{args.url.rstrip('/')}/_admin/{args.command}", timeout=10, trust_env=False)
        response.raise_for_status()
    except httpx.HTTPError as e:
        print(f"could not read {args.command} from {args.url}: {e}", file=sys.stderr)
        return 1
    if args.command == "sessions":
        print(_sessions_table(response.json()["sessions"]))
    else:
        print(json.dumps(response.json(), indent=2, sort_keys=True))
    return 0


def _serve(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    try:
        config = load_config(args.config)
    except ConfigError as e:
        print(e, file=sys.stderr)
        return 2
    serve(config, host=args.host, port=args.port, on_ready=_announce)
    return 0


def _announce(url: str) -> None:
    print(json.dumps({"url": url}), flush=True)


def _sessions_table(sessions: list[dict[str, object]]) -> str:
    rows: list[tuple[str, ...]] = [_SESSION_COLUMNS]
    for s in sessions:
        pinged = s["last_ping_at"]
        ping_age = f"{time.time() - pinged:.1f}s ago" if isinstance(pinged, int | float) else "-"
        rows.append(tuple(ping_age if c == "last_ping_at" else str(s[c]) for c in _SESSION_COLUMNS))
    widths = [max(len(row[i]) for row in rows) for i in range(len(_SESSION_COLUMNS))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in rows)


if __name__ == "__main__":
    sys.exit(main())
