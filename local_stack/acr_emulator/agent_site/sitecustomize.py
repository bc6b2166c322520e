"""Gives every emulated session its own port 8080, inside the agent process (standard library only).

ACR runs each session in its own microVM, where the agent serves on 8080; the emulator runs every session on
one host, so it gives each agent process its own port in ``PORT``. Python imports this module at start-up
(the emulator puts its directory first on the agent's ``PYTHONPATH``); it makes a TCP socket's bind to port
8080 bind to ``$PORT`` instead, so an unmodified agent that calls ``app.run()`` (8080, ACR's contract) serves
its own session, and an agent that binds ``$PORT`` itself is unaffected. A bind to all IPv4 interfaces
becomes a bind to 127.0.0.1: the emulator reaches agents over loopback only. Any other ``sitecustomize`` on
the path (a distribution's, a virtualenv's) is run afterwards, as if this one were not there.
"""

import importlib.machinery
import importlib.util
import os
import socket
import sys
from typing import Any

ACR_PORT = 8080
_PORT_ENV = "PORT"
_IPV4_ANY = ("", "0.0.0.0")
_bind = socket.socket.bind


def _mapped(sock: socket.socket, address: Any) -> Any:
    """``address`` with ACR's port replaced by the session's (and the IPv4 wildcard by loopback)."""
    port = os.environ.get(_PORT_ENV)
    if (
        sock.family not in (socket.AF_INET, socket.AF_INET6)
        or sock.type != socket.SOCK_STREAM
        or not isinstance(address, tuple)
        or len(address) < 2
        or address[1] != ACR_PORT
        or not port
        or not port.isdigit()
    ):
        return address
    host = "127.0.0.1" if sock.family == socket.AF_INET and address[0] in _IPV4_ANY else address[0]
    return (host, int(port), *address[2:])


def _bind_session_port(self: socket.socket, address: Any) -> None:
    _bind(self, _mapped(self, address))


def _run_next_sitecustomize() -> None:
    """Run the ``sitecustomize`` this module shadows, if there is one further down the path."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec(__name__, rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules[__name__] = module
    spec.loader.exec_module(module)


socket.socket.bind = _bind_session_port  # type: ignore[method-assign,assignment]
_run_next_sitecustomize()
