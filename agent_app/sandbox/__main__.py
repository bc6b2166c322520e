"""``python -m agent_app.sandbox [--state-dir DIR]``: serve :class:`SandboxApp` on ``$PORT`` (default 8080)."""

from __future__ import annotations

import argparse
import os

from agent_app._app import DEFAULT_PORT, PORT_ENV
from agent_app.logging import configure_logging
from agent_app.sandbox._app import DEFAULT_STATE_DIR, SandboxApp


def main(argv: list[str] | None = None) -> None:
    """Serve the sandbox until the process is stopped."""
    parser = argparse.ArgumentParser(prog="python -m agent_app.sandbox", description=main.__doc__)
    parser.add_argument("--state-dir", default=str(DEFAULT_STATE_DIR), help="where command records live")
    parser.add_argument("--workspace", default=os.getcwd(), help="where commands run unless they name a directory")
    args = parser.parse_args(argv)
    configure_logging()
    SandboxApp(state_dir=args.state_dir, workspace=args.workspace).run(port=int(os.environ.get(PORT_ENV, DEFAULT_PORT)))


if __name__ == "__main__":
    main()
