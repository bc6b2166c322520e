"""What rLLM's ``RemoteAgentFlowEngine.process_task_with_retry`` does for one task (not an rLLM module).

Rewritten from rllm/engine/remote_agent_flow_engine.py at 9beb6e0f: a new session id, the gateway session created
with the mode's sampling parameters, ONE task per ``execute_tasks`` call, reward 0.0 for an unfinished result,
``metadata`` merged into the episode's and ``metadata["error"]`` from ``raw_result``, the session's traces read,
then the session deleted. The episode here is its metadata and the traces (rLLM builds Steps from them).
"""

import uuid

from rllm.engine.remote_runtime.protocol import RemoteAgentRuntime, TaskSubmission


async def run_one(
    runtime: RemoteAgentRuntime, gateway, task: dict, task_id: str, session_timeout: float, is_validation=False
):
    """One rollout as rLLM's engine drives it through ``gateway`` (a ``GatewayManager``); returns
    ``(result, episode_metadata, traces)``."""
    session_id = str(uuid.uuid4())
    await gateway.acreate_session(session_id, is_validation=is_validation)
    submission = TaskSubmission(
        task=task, session_id=session_id, task_id=task_id, inference_url=gateway.get_session_url(session_id)
    )
    result = (await runtime.execute_tasks([submission], timeout=session_timeout))[0]
    if not result.finished:
        result.reward = 0.0
    traces = await gateway.aget_traces(session_id)
    metadata = dict(result.metadata or {})
    if not result.finished:
        error_info = {"error_message": result.error or "Unknown error", "elapsed": result.elapsed}
        for key in ("stop_reason", "traceback", "status_code"):
            if result.raw_result and key in result.raw_result:
                error_info[key] = result.raw_result[key]
        metadata["error"] = error_info
    await gateway.adelete_session(session_id)
    return result, metadata, traces


class SessionUrls:
    """A gateway that only hands out session URLs under ``url``, for a runtime tested without a gateway."""

    def __init__(self, url):
        self.url = url.rstrip("/")

    def get_session_url(self, session_id):
        return f"{self.url}/sessions/{session_id}/v1"

    async def acreate_session(self, session_id, is_validation=False, sampling_params=None):
        return session_id

    async def aget_traces(self, session_id):
        return []

    async def adelete_session(self, session_id):
        return 0
