"""Stand-in of ``rllm.data.dataset``: ``Dataset`` and the ``DatasetRegistry`` calls the launchers make.

rLLM keeps registered splits as parquet files under ``$RLLM_HOME/datasets`` (default ``~/.rllm``) with a
``registry.json``; the stand-in keeps each split as ``$RLLM_HOME/datasets/<name>/<split>.json`` (no parquet
reader needed). ``load_dataset`` returns ``None`` for an unknown dataset or split, as rLLM's does.
"""

import json
import os
from pathlib import Path


class Dataset:
    def __init__(self, data, name=None, split=None):
        self.data = data
        self.name = name
        self.split = split

    def __len__(self):
        return len(self.data)

    def __getitem__(self, idx):
        return self.data[idx]

    def get_data(self):
        return self.data


class DatasetRegistry:
    @staticmethod
    def _path(name, split):
        home = os.path.expanduser(os.environ.get("RLLM_HOME", "~/.rllm"))
        return Path(home) / "datasets" / name / f"{split}.json"

    @classmethod
    def register_dataset(cls, name, data, split="default"):
        path = cls._path(name, split)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(list(data)))
        return Dataset(data=list(data), name=name, split=split)

    @classmethod
    def load_dataset(cls, name, split="default"):
        path = cls._path(name, split)
        if not path.is_file():
            return None
        return Dataset(data=json.loads(path.read_text()), name=name, split=split)
