"""Run the model endpoint: ``python -m local_stack.model_endpoint --port 0 --port-file FILE [--policy transformer]``."""

from __future__ import annotations

import argparse
import socket
from collections.abc import Sequence
from pathlib import Path

import uvicorn

from local_stack.model_endpoint.app import DEFAULT_MODEL_NAME, POLICIES, STAND_IN, EndpointSettings, create_app

#: How long an idle connection stays open: longer than the gateway's proxy keeps one in its pool (httpx: 5 s), so
#: the proxy never sends a model call on a connection this server is closing. At uvicorn's default, 5 s too, a call
#: after a pause failed now and then with a ReadError at the gateway, and its agent with it.
KEEP_ALIVE_S = 75


def main(argv: Sequence[str] | None = None) -> None:
    """Serve the stand-in model on ``--host``:``--port`` (port 0: the OS chooses, see ``--port-file``)."""
    parser = argparse.ArgumentParser(
        prog="python -m local_stack.model_endpoint",
        description="An offline, seeded stand-in for a vLLM OpenAI-compatible server (see local_stack.model_endpoint).",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 lets the OS choose (written to --port-file)")
    parser.add_argument("--port-file", type=Path, help="file that receives the port once the socket is bound")
    parser.add_argument("--model-name", default=DEFAULT_MODEL_NAME)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--latency", type=float, default=0.0, help="simulated seconds per call")
    parser.add_argument("--policy", choices=POLICIES, default=STAND_IN, help="what answers (default: the stand-in)")
    parser.add_argument(
        "--script", type=Path, help="scripted answers for the stand-in (JSON; see model_endpoint.script)"
    )
    parser.add_argument(
        "--moe", action="store_true", help="a tiny mixture of experts: return each choice's routed_experts (as vLLM)"
    )
    parser.add_argument(
        "--tinker", action="store_true", help="also serve the Tinker API on the transformer policy (training, sampling)"
    )
    args = parser.parse_args(argv)
    try:
        settings = EndpointSettings(
            model_name=args.model_name,
            seed=args.seed,
            latency_s=args.latency,
            policy=args.policy,
            script=args.script,
            moe=args.moe,
            tinker=args.tinker,
        )
    except ValueError as exc:
        parser.error(str(exc))
    # proto=IPPROTO_TCP makes asyncio set TCP_NODELAY on accepted connections (40 ms stalls otherwise).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    if args.port_file:
        args.port_file.write_text(str(sock.getsockname()[1]))
    app = create_app(settings)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, timeout_keep_alive=KEEP_ALIVE_S))
    server.run(sockets=[sock])


if __name__ == "__main__":
    main()
