"""The Tinker endpoint this shell names, and ``rollouts doctor``'s check of it.

The ``tinker`` SDK reads ``TINKER_BASE_URL`` (default: the official service) and ``TINKER_API_KEY``;
``rollouts local status --env`` exports the local endpoint's URL (``rollouts local up --tinker``). When either is
set, the doctor asks the endpoint what it serves (``GET /api/v1/get_server_capabilities``, the key in
``X-API-Key``), so a wrong URL, a refused key or a base model it does not serve shows before a training run.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = ["OFFICIAL_BASE_URL", "probe_tinker"]

#: Where the SDK goes without ``TINKER_BASE_URL`` (``tinker.lib.base_url.DEFAULT_BASE_URL``).
OFFICIAL_BASE_URL = "https://tinker.thinkingmachines.dev/services/tinker-prod"
PROBE_TIMEOUT_S = 10.0


def probe_tinker(environ: Mapping[str, str] | None = None) -> tuple[bool, str, str] | None:
    """``(ok, detail, fix)`` for the Tinker endpoint the environment names, or None when it names none."""
    environ = os.environ if environ is None else environ
    url, key = environ.get("TINKER_BASE_URL"), environ.get("TINKER_API_KEY")
    if not url and not key:
        return None
    import httpx  # here, not at the top: the rollouts CLI imports this module and starts without an HTTP client

    url = (url or OFFICIAL_BASE_URL).rstrip("/")
    headers = {"X-API-Key": key} if key else {}
    try:
        response = httpx.get(f"{url}/api/v1/get_server_capabilities", headers=headers, timeout=PROBE_TIMEOUT_S)
    except httpx.HTTPError as exc:
        fix = "check TINKER_BASE_URL (locally: rollouts local up --tinker, then eval its `local status --env`)"
        return False, f"{url} did not answer: {type(exc).__name__}: {exc}", fix
    if response.status_code in (401, 403):
        return False, f"{url} refused the key ({response.status_code})", "set TINKER_API_KEY to a key of this service"
    if response.status_code != 200:
        return False, f"{url} answered {response.status_code}: {response.text[:200]}", "check TINKER_BASE_URL"
    models = [
        f"{model.get('model_name')}{'' if model.get('trainable', True) else ' (sampling only)'}"
        for model in response.json().get("supported_models") or []
    ]
    return True, f"{url} serves {', '.join(models) or 'no models'}", ""
