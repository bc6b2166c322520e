"""Real verl pieces for the verl adapter's tests: verl's own composed config, a tokenizer, its V1 worker.

The trainer config is verl 0.9.1's ``ppo_trainer`` composed with Hydra plus exactly the overrides of the
README's verl block (``examples/math_agent/backends/verl.sh``), never a hand-written dict. The only
stand-in is :class:`MemoryTransferQueue`, the storage under verl's V1 code (the real TransferQueue starts
Ray, a controller and storage actors: 36 s on this machine); verl's worker and trainer code run unchanged.
"""

from __future__ import annotations

import functools
import shlex
from pathlib import Path
from typing import Any

import hydra.utils
import torch
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf
from tokenizer_support import model_dir, tokenizer
from transfer_queue import KVBatchMeta
from transformers import PreTrainedTokenizerFast
from verl.experimental.agent_loop.agent_loop import AgentLoopWorker, DictConfigWrap, ToolListWrap
from verl.utils.tensordict_utils import list_of_dict_to_tensordict

__all__ = ["LOOP_ENTRY", "VERL_COMMAND", "MemoryTransferQueue", "ServerIds", "build_loop", "legacy_worker", "model_dir"]
__all__ += ["readme_overrides", "tokenizer", "trainer_config"]

REPO = Path(__file__).parents[2]
#: The README's verl command line and the agent loop YAML it names (relative to the repository root).
VERL_COMMAND = REPO / "examples" / "math_agent" / "backends" / "verl.sh"
#: The entry a user puts in the file ``actor_rollout_ref.rollout.agent.agent_loop_config_path`` names.
LOOP_ENTRY = {"name": "agentcore", "_target_": "trainer_client.backends.verl.AgentCoreAgentLoop"}


def readme_overrides() -> list[str]:
    """The ``key=value`` arguments of the README's verl command (``"$@"`` is the user's own job)."""
    return [arg for arg in shlex.split(VERL_COMMAND.read_text()) if "=" in arg]


@functools.cache
def _composed(overrides: tuple[str, ...]) -> Any:
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        return compose(config_name="ppo_trainer", overrides=list(overrides))


def trainer_config(*extra: str, model_dir: Path | None = None) -> Any:
    """verl's ``ppo_trainer`` composed with the README's overrides and ``extra`` (a copy per call).

    ``model_dir`` sets ``actor_rollout_ref.model.path`` and ``rollout.name`` (what every verl job sets),
    which verl's worker needs to load its tokenizer.
    """
    job = (f"actor_rollout_ref.model.path={model_dir}", "actor_rollout_ref.rollout.name=vllm") if model_dir else ()
    return OmegaConf.create(OmegaConf.to_container(_composed((*readme_overrides(), *job, *extra))))


def build_loop(entry: dict[str, Any], config: Any, tok: PreTrainedTokenizerFast, server_manager: Any = None) -> Any:
    """Instantiate a registry entry the way ``AgentLoopWorker._run_agent_loop`` does (``server_manager``: verl's
    ``LLMServerClient`` of its rollout servers, none by default)."""
    return hydra.utils.instantiate(
        config=OmegaConf.create(entry),
        trainer_config=DictConfigWrap(config=config),
        server_manager=server_manager,
        tokenizer=tok,
        processor=None,
        hf_model_type=None,
        dataset_cls=None,
        data_config=DictConfigWrap(config.data),
        tools=ToolListWrap([]),
    )


def legacy_worker(config: Any, tok: PreTrainedTokenizerFast) -> AgentLoopWorker:
    """verl's own (V0) worker, without Ray or servers, to run its real post-processing on our outputs."""
    worker = object.__new__(AgentLoopWorker)
    worker.config = config
    worker.rollout_config = config.actor_rollout_ref.rollout
    worker.tokenizer = tok
    worker.processor = None
    worker.reward_loop_worker_handles = None
    worker.distillation_enabled = False
    worker.mm_processor_kwargs = {}
    return worker


class ServerIds:
    """A handle of verl's load balancer actor (``GlobalRequestLoadBalancer``) for its one call the loop makes:
    ``await handle.get_all_servers.remote()``, the rollout servers' ids (their ``host:port``)."""

    def __init__(self, servers: list[str]) -> None:
        self.servers = servers
        self.get_all_servers = self

    async def remote(self) -> list[str]:
        return list(self.servers)


class MemoryTransferQueue:
    """TransferQueue's key-value calls that verl's V1 worker and trainer make, on a dict in this process.

    Like the real one: fields are stored per key, a read returns the requested fields that exist (jagged
    tensors for variable lengths, as ``list_of_dict_to_tensordict`` builds them), tags merge per key.
    """

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], dict[str, Any]] = {}
        self.tags: dict[tuple[str, str], dict[str, Any]] = {}

    def init(self, conf: Any = None) -> None:
        """Nothing to start."""

    def keys(self, partition_id: str) -> list[str]:
        """Keys that hold fields (samples, not only prompt tags), in insertion order."""
        return [key for (partition, key) in self.rows if partition == partition_id]

    def kv_batch_put(self, keys: list[str], partition_id: str, fields: Any = None, tags: Any = None) -> KVBatchMeta:
        if fields is not None:
            for key, row in zip(keys, _rows(fields), strict=True):
                self.rows.setdefault((partition_id, key), {}).update(row)
        for key, tag in zip(keys, tags or [{}] * len(keys), strict=True):
            self.tags.setdefault((partition_id, key), {}).update(tag)
        tags = [self.tags[(partition_id, key)] for key in keys]
        return KVBatchMeta(keys=list(keys), tags=tags, partition_id=partition_id)

    async def async_kv_batch_put(self, keys: list[str], partition_id: str, fields: Any = None, tags: Any = None):
        return self.kv_batch_put(keys, partition_id, fields, tags)

    async def async_kv_put(self, key: str, partition_id: str, fields: Any = None, tag: Any = None) -> None:
        self.tags.setdefault((partition_id, key), {}).update(tag or {})

    def kv_batch_get(self, keys: list[str], partition_id: str, select_fields: list[str] | None = None) -> Any:
        rows = [self.rows[(partition_id, key)] for key in keys]
        names = [name for name in (select_fields or rows[0]) if name in rows[0]]
        return list_of_dict_to_tensordict([{name: row[name] for name in names} for row in rows])


def _rows(fields: Any) -> list[dict[str, Any]]:
    """A TensorDict of a batch as one dict per sample."""
    columns = {}
    for name in fields.keys():
        value = fields.get(name)
        columns[name] = list(value.unbind(0)) if isinstance(value, torch.Tensor) else value.tolist()
    return [dict(zip(columns, values, strict=True)) for values in zip(*columns.values(), strict=True)]
