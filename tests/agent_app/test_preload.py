"""``agent_app.preload`` leaves a forked session nothing to import on its first request or model call (D105)."""

from __future__ import annotations

import json
import subprocess
import sys

# Run in a fresh interpreter: what a session would import is what this process has not imported yet.
FIRST_USE = """
import json, sys
import agent_app.preload
import openai
before = set(sys.modules)
client = openai.AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="unused")
client.chat.completions  # what strands' OpenAIModel touches on every model call, with a client of its own
print(json.dumps(sorted(name for name in set(sys.modules) - before if name.startswith("openai"))))
"""


def test_a_sessions_first_chat_client_imports_no_openai_module() -> None:
    run = subprocess.run([sys.executable, "-c", FIRST_USE], capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(run.stdout) == []
