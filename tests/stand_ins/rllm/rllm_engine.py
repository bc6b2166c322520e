"""What rLLM's ``RemoteAgentFlowEngine.process_task_with_retry`` does with a runtime's result (not an rLLM module).

rLLM's engine makes the session id and gateway session, submits one task per ``execute_tasks`` call, zeroes
the reward of an unfinished result, merges ``metadata`` into the episode's and records ``metadata["error"]``
from ``raw_result``. The episode here is a plain dict (the real one is built from gateway traces).
"""

import uuid

from rllm.engine.remote_runtime.protocol import RemoteAgentRuntime, TaskSubmission


async def run_one(runtime: RemoteAgentRuntime, task: dict, task_id: str, session_url: str, session_timeout: float):
    """One rollout as rLLM's engine drives it; returns ``(result, episode_metadata)``."""
    session_id = str(uuid.uuid4())
    submission = TaskSubmission(
        task=task, session_id=session_id, task_id=task_id, inference_url=session_url(session_id)
    )
    result = (await runtime.execute_tasks([submission], timeout=session_timeout))[0]
    if not result.finished:
        result.reward = 0.0
    metadata = dict(result.metadata)
    if not result.finished:
        error_info = {"error_message": result.error or "Unknown error", "elapsed": result.elapsed}
        for key in ("stop_reason", "traceback", "status_code"):
            if result.raw_result and key in result.raw_result:
                error_info[key] = result.raw_result[key]
        metadata["error"] = error_info
    return result, metadata
