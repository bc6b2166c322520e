"""What rLLM's ``RemoteAgentFlowEngine.process_task_with_retry`` does for one task (not an rLLM module).

Rewritten from rllm/engine/remote_agent_flow_engine.py at 9beb6e0f: a new session id, the gateway session created
with the mode's sampling parameters, ONE task per ``execute_tasks`` call, reward 0.0 for an unfinished result,
``metadata`` merged into the episode's and ``metadata["error"]`` from ``raw_result``, the session's traces read,
then the session deleted. The episode here is its metadata and the traces (rLLM builds Steps from them).
"""

import asyncio
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


class RemoteAgentFlowEngine:
    """rLLM's ``RemoteAgentFlowEngine.execute_tasks``: every task through :func:`run_one` (at most
    ``n_parallel_tasks`` at once), each an ``Episode`` with one trajectory of the session's traces as steps (rLLM's
    ``trace_record_to_step``: prompt ids, completion ids, logprobs) and the runtime's reward."""

    def __init__(self, runtime, gateway, session_timeout, n_parallel_tasks=256):
        self.runtime = runtime
        self.gateway = gateway
        self.session_timeout = session_timeout
        self._semaphore = asyncio.Semaphore(n_parallel_tasks)

    async def execute_tasks(self, tasks, task_ids, is_validation=False, **kwargs):
        counts = {}
        indexed = []
        for task, task_id in zip(tasks, task_ids, strict=True):
            indexed.append((task, task_id, counts.get(task_id, 0)))
            counts[task_id] = counts.get(task_id, 0) + 1
        return await asyncio.gather(
            *(self._one(task, task_id, index, is_validation) for task, task_id, index in indexed)
        )

    async def _one(self, task, task_id, rollout_idx, is_validation):
        from rllm.types import Episode, Step, Trajectory

        async with self._semaphore:
            result, metadata, traces = await run_one(
                self.runtime, self.gateway, task, task_id, self.session_timeout, is_validation
            )
        steps = [
            Step(
                prompt_ids=list(t.prompt_token_ids),
                response_ids=list(t.completion_token_ids),
                logprobs=list(t.logprobs or []),
            )
            for t in traces
        ]
        trajectories = [Trajectory(name="default", task=task, steps=steps, reward=result.reward)]
        if not steps and result.reward is None:
            trajectories = []
        return Episode(
            id=f"{task_id}:{rollout_idx}",
            task=task,
            is_correct=bool(result.reward and result.reward >= 1.0),
            session_id=result.session_id,
            trajectories=trajectories,
            metrics={"empty": int(not traces), "steps_collected": len(traces)},
            metadata=metadata,
            termination_reason=result.termination_reason,
        )
