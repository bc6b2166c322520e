"""The token gateway: rllm-model-gateway 0.1.0, unmodified, served by ``trainer_client.gateway`` as a process.

Agents call ``{gateway}/sessions/{session_id}/v1``; the gateway forwards to the model endpoint and
records, per call, the prompt and completion token ids and the logprobs, which the trainer reads from
``GET {gateway}/sessions/{session_id}/traces``.

What was checked against our needs (its code read in 0.1.0, behaviour tested in ``tests/local_stack``):

- Session-scoped URL: met. ``/sessions/<sid>/v1/...`` is routed and traced under ``sid``; calls
  without the prefix are proxied but not traced.
- Token ids and logprobs: met, given an upstream that returns vLLM's fields. It adds ``logprobs: true``
  and ``return_token_ids: true`` to every request and strips ``prompt_token_ids``, ``token_ids`` (and
  logprobs the client did not ask for) from what the agent sees. It also adds a literal ``extra_body``
  key to the JSON body: vLLM and the stand-in model ignore it, a strict server rejects it.
- Streaming requests from Strands (``stream: true`` with ``stream_options.include_usage``): met. The
  trace takes ``prompt_token_ids`` from the first chunk and joins ``token_ids`` and logprobs over all
  chunks, as vLLM streams them.

Gaps, documented rather than patched (no adapter was needed):

- A streamed call's trace is written by a background task after the last chunk, even with
  ``sync_traces`` (which only makes non-streamed writes synchronous), and ``POST /admin/flush`` does not
  wait for it: a read right after the call can miss it by milliseconds. ``trainer_client.gateway`` adds
  ``GET /sessions/<sid>/traces/settled``, which answers once the session has no call in flight and those
  writes are done, so the trainer joins traces with one exact read.
- A client that sends ``logprobs: false`` explicitly keeps it (the gateway only adds a missing field),
  and its traces then have no logprobs.
- A streamed tool call appears in the trace's ``response_message`` as the raw deltas, not merged into
  one call (token ids and logprobs are complete; only this readable copy is fragmented).
- No authentication: ``trainer_client.gateway`` adds it (``--experiment``: the experiment's model-call and admin
  keys from Secrets Manager, D100); the stack's gateway takes its experiments' keys from moto, read with the
  trainer's credentials, and still listens on 127.0.0.1 only.
- Its health check polls ``{worker}/health`` every ``health_check_interval`` seconds and stops routing
  to a worker after three failures: a real endpoint must serve ``/health`` (vLLM and SGLang do).

The config is written as YAML (the CLI has no flag for ``sync_traces`` or the health interval); traces go
to SQLite in the run directory, not the default ``~/.rllm/gateway_traces.db``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from local_stack._process import LOCALHOST, ManagedProcess, free_port, http_ready
from local_stack.moto_server import LOCAL_REGION, credentials
from rollout_contract.aws import ClientFactory

if TYPE_CHECKING:
    from trainer_client._gateway_auth import GatewayAuth

__all__ = ["admin_auth", "gateway_process", "session_base_url"]

HEALTH_CHECK_INTERVAL_S = 5.0


def session_base_url(gateway_url: str, session_id: str) -> str:
    """Return the OpenAI base URL an agent uses so the gateway traces its calls under ``session_id``."""
    if "/" in session_id:
        raise ValueError(f"session id {session_id!r} contains '/', which the gateway's session URL cannot carry")
    return f"{gateway_url.rstrip('/')}/sessions/{session_id}/v1"


def admin_auth(moto_url: str, exp_id: str) -> GatewayAuth:
    """The admin credential of experiment ``exp_id``'s gateway routes on the local stack whose moto is at
    ``moto_url``, read as the trainer reads it (``httpx`` auth; ``RolloutClient.gateway_auth`` is the same)."""
    from trainer_client._gateway_auth import GatewayAuth  # httpx: only for callers of the gateway

    factory = ClientFactory(
        region=LOCAL_REGION, endpoints={"secretsmanager": moto_url}, credentials=credentials("trainer")
    )
    return GatewayAuth.admin(factory.client("secretsmanager"), exp_id)


def gateway_process(
    *,
    model_base_url: str,
    run_dir: Path,
    base_env: Mapping[str, str],
    port: int | None = None,
    experiments: Sequence[str] = (),
) -> ManagedProcess:
    """Describe an rllm-model-gateway child on 127.0.0.1 in front of ``model_base_url`` (``http://.../v1``).

    Writes ``gateway.yaml`` into ``run_dir``; traces go to ``run_dir/gateway_traces.db``. It accepts the credentials
    of ``experiments`` (read from Secrets Manager with ``base_env``'s credentials), or every caller when none.
    """
    port = port or free_port()
    config = {
        "host": LOCALHOST,
        "port": port,
        "workers": [{"url": model_base_url, "worker_id": "model"}],
        "store_worker": "sqlite",
        "db_path": str(run_dir / "gateway_traces.db"),
        "sync_traces": True,
        "health_check_interval": HEALTH_CHECK_INTERVAL_S,
        "log_level": "WARNING",
    }
    config_path = run_dir / "gateway.yaml"
    config_path.parent.mkdir(parents=True, exist_ok=True)
    # JSON is YAML: no YAML writer needed.
    config_path.write_text(json.dumps(config, indent=2))
    url = f"http://{LOCALHOST}:{port}"
    return ManagedProcess(
        name="gateway",
        argv=[
            sys.executable,
            "-m",
            "trainer_client.gateway",
            "--config",
            str(config_path),
            *([arg for name in experiments for arg in ("--experiment", name)] or ["--open"]),
        ],
        log_path=run_dir / "gateway.log",
        env=dict(base_env),
        url=url,
        ready=http_ready(f"{url}/health"),
    )
