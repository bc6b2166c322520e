"""Stand-in of ``rllm.gateway.manager.GatewayManager``: the gateway calls rLLM's engines make through it.

rLLM's ``GatewayManager`` also starts its gateway (``python -m rllm_model_gateway`` with the verl backend, a
thread with tinker) and registers the rollout engine's servers as workers in ``start``; the stand-in uses a
gateway already running at ``rllm.gateway.host``:``rllm.gateway.port`` and registers nothing. Each request is
the one rLLM's ``AsyncGatewayClient`` sends (rllm-model-gateway/src/rllm_model_gateway/client.py), field for
field, and traces come back as its ``TraceRecord`` objects.
"""

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
        """The rollout engine's per-mode sampling parameters (rLLM also starts the gateway and adds workers)."""
        self._train_sampling_params = getattr(rollout_engine, "train_sampling_params", {})
        self._val_sampling_params = getattr(rollout_engine, "val_sampling_params", {})

    def stop(self):
        pass

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
