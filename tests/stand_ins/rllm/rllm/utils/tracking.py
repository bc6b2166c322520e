"""Stand-in of ``rllm.utils.tracking``: ``Tracking`` with rLLM's ``console`` and ``file`` backends.

The file backend writes ``{"step": N, "data": {...}}`` lines to ``$VERL_FILE_LOGGER_PATH``, else to
``$VERL_FILE_LOGGER_ROOT/<project>/<experiment>.jsonl`` (root ``.``), as rLLM's ``FileLogger``; other backends
(``ui``, ``wandb``, ...) are accepted and log nothing here.
"""

import json
import os


class Tracking:
    def __init__(self, project_name, experiment_name, default_backend="console", config=None, source_metadata=None):
        backends = [default_backend] if isinstance(default_backend, str) else list(default_backend)
        self._console = "console" in backends
        self._file = None
        if "file" in backends:
            path = os.getenv("VERL_FILE_LOGGER_PATH")
            if path is None:
                directory = os.path.join(os.path.expanduser(os.getenv("VERL_FILE_LOGGER_ROOT", ".")), project_name)
                os.makedirs(directory, exist_ok=True)
                path = os.path.join(directory, f"{experiment_name}.jsonl")
            self._file = open(path, "w")  # noqa: SIM115 - closed by finish(), as rLLM's

    def log(self, data, step, **kwargs):
        if self._console:
            print(f"step {step}: " + ", ".join(f"{key}={value}" for key, value in sorted(data.items())))
        if self._file is not None:
            self._file.write(json.dumps({"step": step, "data": data}) + "\n")
            self._file.flush()

    def finish(self):
        if self._file is not None:
            self._file.close()
            self._file = None
