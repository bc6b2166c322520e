"""A tiny ACR container-contract agent on the standard library only (starts in tens of milliseconds).

Serves ``127.0.0.1:$PORT``. ``POST /invocations`` with a JSON object:
- ``{"busy_s": 2}``: answer at once, report ``HealthyBusy`` on ``/ping`` for 2 s;
- ``{"fail": 500}``: answer with that HTTP status;
- ``{"stream": 3}``: answer with 3 server-sent events;
- anything else: answer with the process's identity (pid, process group, parent, argv, session and request
  ids, dirs, environment, and which process imported ``preload_marker`` if a fork server preloaded it).
Flags: ``--never-ready`` (never listens), ``--port N`` (listen on N, ignoring ``PORT``), ``--ignore-sigterm``,
``--announce`` (print ``agent pid=<pid>`` on
stdout once listening).
"""

import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SESSION_HEADER = "X-Amzn-Bedrock-AgentCore-Runtime-Session-Id"
REQUEST_ID_HEADER = "X-Amzn-Bedrock-AgentCore-Runtime-Request-Id"


class State:
    busy_until = 0.0
    last_change = int(time.time())
    lock = threading.Lock()

    @classmethod
    def status(cls):
        return "HealthyBusy" if time.time() < cls.busy_until else "Healthy"

    @classmethod
    def make_busy(cls, seconds):
        with cls.lock:
            cls.busy_until = time.time() + seconds
            cls.last_change = int(time.time())


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def _send(self, status, body, content_type="application/json"):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            # The emulator hung up (a ping in flight while it stops the session): nothing to answer.
            self.close_connection = True

    def do_GET(self):
        if self.path != "/ping":
            self._send(404, {"error": "not found"})
            return
        self._send(200, {"status": State.status(), "time_of_last_update": State.last_change})

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        payload = json.loads(body or b"{}")
        if "fail" in payload:
            self._send(payload["fail"], {"error": "requested failure"})
        elif "busy_s" in payload:
            State.make_busy(payload["busy_s"])
            self._send(200, {"status": "processing", "pid": os.getpid()})
        elif "stream" in payload:
            events = b"".join(b"data: " + json.dumps({"i": i}).encode() + b"\n\n" for i in range(payload["stream"]))
            self._send(200, events, content_type="text/event-stream")
        else:
            self._send(
                200,
                {
                    "pid": os.getpid(),
                    "session_id": self.headers.get(SESSION_HEADER),
                    "request_id": self.headers.get(REQUEST_ID_HEADER),
                    "headers": dict(self.headers.items()),
                    "payload": payload,
                    "cwd": os.getcwd(),
                    "env": dict(os.environ),
                    "pgid": os.getpgid(0),
                    "ppid": os.getppid(),
                    "argv": sys.argv,
                    "main": __name__,
                    "preload_marker_imported_by": getattr(sys.modules.get("preload_marker"), "IMPORTED_BY", None),
                },
            )


def main():
    if "--ignore-sigterm" in sys.argv:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if "--never-ready" in sys.argv:
        time.sleep(3600)
        return
    port = int(sys.argv[sys.argv.index("--port") + 1]) if "--port" in sys.argv else int(os.environ["PORT"])
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    if "--announce" in sys.argv:
        print(f"agent pid={os.getpid()}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
