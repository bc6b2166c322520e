"""Import this in a process that forks agent sessions to do once what each session would do on its first rollout.

The local stack's fork server (``preload``, :mod:`local_stack.acr_emulator.forkserver`) imports it before
forking: each session of an :class:`~agent_app.AgentCoreRLApp` then starts with the modules its server and first
request import lazily (uvicorn's protocols and loop, anyio's asyncio backend) already loaded, with S3's service model
already parsed for its result writer (about 85 ms of CPU per session, a quarter of a short rollout's), and with the
OpenAI SDK's resource modules loaded when the SDK is installed (a client loads them at its first ``.chat``: 0.4 s of
CPU at idle, 70% of the example math agent's session before, D105). Importing it starts no thread and opens no
connection, so a fork copies a clean process. An agent in AWS has no use for it: each session there is a process of
its own.
"""

from __future__ import annotations

import importlib
import importlib.util

import agent_app  # noqa: F401 - the app itself, and through it bedrock_agentcore, starlette and boto3
from rollout_contract.aws import parse_service_models

#: Modules a session imports only once it serves (uvicorn picks its protocols when it starts; anyio loads its
#: backend at the first hop to a worker thread).
LAZY_MODULES = (
    "uvicorn",
    "uvicorn.protocols.http.auto",
    "uvicorn.protocols.websockets.auto",
    "uvicorn.lifespan.on",
    "uvicorn.loops.auto",
    "anyio._backends._asyncio",
)

#: Modules of an agent's usual libraries that load on first use, imported when their library is installed: the
#: OpenAI SDK (strands' ``OpenAIModel``, LiteLLM, the SDK itself) loads every resource module at a client's first
#: ``.chat``, and strands makes a client per model call.
LIBRARY_LAZY_MODULES = ("openai.resources",)

for _name in LAZY_MODULES:
    importlib.import_module(_name)
for _name in LIBRARY_LAZY_MODULES:
    if importlib.util.find_spec(_name.partition(".")[0]) is not None:
        importlib.import_module(_name)
parse_service_models("s3")
