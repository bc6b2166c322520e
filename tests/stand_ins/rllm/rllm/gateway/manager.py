"""Stand-in of ``rllm.gateway.manager.GatewayManager``: the gateway calls rLLM's engines make through it.

rLLM's ``GatewayManager`` also starts its gateway (``python -m rllm_model_gateway`` with the verl backend, a
thread with tinker) and registers the rollout engine's servers as workers in ``start``; the stand-in uses a
gateway already running at ``rllm.gateway.host``:``rllm.gateway.port``. Each request is the one rLLM's
``AsyncGatewayClient`` sends (rllm-model-gateway/src/rllm_model_gateway/client.py), field for field, and traces
come back as its ``TraceRecord`` objects.

With a ``TinkerEngine`` rLLM hands ``create_tinker_handler(engine)`` to its gateway's app as the in-process upstream
(``create_app(local_handler=...)``, a gateway release PyPI's 0.1.0 predates). The stand-in serves that handler as
an OpenAI worker in a thread and makes it the running gateway's only worker (``/admin/workers``, as
``GatewayClient.add_worker`` and ``remove_worker`` send), so every model call of a session still reaches the engine.
"""

import socket
import threading
import time

import httpx
from rllm_model_gateway.models import TraceRecord

#: rLLM's _TRACE_API_TIMEOUT.
TRACE_API_TIMEOUT = 600.0


class GatewayManager:
    def __init__(self, config, mode="thread"):
        gw_cfg = config.rllm.get("gateway", {})
        # rLLM: the host's routable IP (a UDP probe) when rllm.gateway.host is null
        self.host = gw_cfg.get("host", None) or "127.0.0.1"
        self.port = gw_cfg.get("port", 9090)
        self.mode = mode
        self._train_sampling_params = {}
        self._val_sampling_params = {}

    @property
    def gateway_url(self):
        return f"http://{self.host}:{self.port}"

    def start(self, rollout_engine):
        """The rollout engine's per-mode sampling parameters; a Tinker engine's handler as the only worker."""
        if type(rollout_engine).__name__ == "TinkerEngine":
            from rllm.gateway.tinker_adapter import create_tinker_handler

            self._handler_worker = _HandlerWorker(create_tinker_handler(rollout_engine))
            self._only_worker(self._handler_worker.url)
        self._train_sampling_params = getattr(rollout_engine, "train_sampling_params", {})
        self._val_sampling_params = getattr(rollout_engine, "val_sampling_params", {})

    def stop(self):
        worker = getattr(self, "_handler_worker", None)
        if worker is not None:
            worker.stop()
            self._handler_worker = None

    def set_weight_version(self, weight_version):
        httpx.post(
            f"{self.gateway_url}/admin/weight_version", json={"weight_version": weight_version}
        ).raise_for_status()

    async def aset_weight_version(self, weight_version):
        await self._request("POST", "/admin/weight_version", json={"weight_version": weight_version})

    def _only_worker(self, url):
        with httpx.Client(timeout=30.0) as http:
            workers = http.get(f"{self.gateway_url}/admin/workers")
            workers.raise_for_status()
            for worker in workers.json():
                http.delete(f"{self.gateway_url}/admin/workers/{worker['worker_id']}").raise_for_status()
            http.post(
                f"{self.gateway_url}/admin/workers", json={"url": url, "api_path": "/v1", "weight": 1}
            ).raise_for_status()

    def get_session_url(self, session_id, *, public=True):
        return f"{self.gateway_url}/sessions/{session_id}/v1"

    async def acreate_session(self, session_id, is_validation=False, sampling_params=None):
        sp = sampling_params
        if sp is None:
            sp = self._val_sampling_params if is_validation else self._train_sampling_params
        body = {"session_id": session_id}
        if sp:
            body["sampling_params"] = sp
        response = await self._request("POST", "/sessions", json=body)
        return response.json()["session_id"]

    async def aget_traces(self, session_id):
        await self._request("POST", "/admin/flush")
        response = await self._request("GET", f"/sessions/{session_id}/traces")
        return [TraceRecord(**trace) for trace in response.json()]

    async def adelete_session(self, session_id):
        await self._request("POST", "/admin/flush")
        return (await self._request("DELETE", f"/sessions/{session_id}")).json().get("deleted", 0)

    async def _request(self, method, path, **kwargs):
        # rLLM's client opens a connection per request (max_keepalive_connections=0)
        limits = httpx.Limits(max_keepalive_connections=0)
        async with httpx.AsyncClient(timeout=TRACE_API_TIMEOUT, limits=limits) as http:
            response = await http.request(method, f"{self.gateway_url}{path}", **kwargs)
            response.raise_for_status()
            return response


class _HandlerWorker:
    """An OpenAI chat server on 127.0.0.1 (a free port) that answers each request with ``handler(body)``, and
    ``GET /health`` for the gateway's health checks."""

    def __init__(self, handler):
        import uvicorn
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import JSONResponse
        from starlette.routing import Route

        async def chat(request: Request):
            return JSONResponse(await handler(await request.json()))

        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._socket.getsockname()[1]}"

        async def health(request: Request):
            return JSONResponse({"status": "ok"})

        routes = [Route("/v1/chat/completions", chat, methods=["POST"]), Route("/health", health, methods=["GET"])]
        app = Starlette(routes=routes)
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the Tinker handler did not start on {self.url}")
            time.sleep(0.02)

    def stop(self):
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._socket.close()
