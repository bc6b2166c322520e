"""Stand-in of ``rllm.trainer.unified_trainer.UnifiedTrainer``: how it picks, starts and stops a remote runtime.

What rLLM's ``__init__`` does when ``rllm.remote_runtime.enabled`` (a lazy import of the factory, the
``RemoteRuntimeConfig`` built from the config block with the same fallbacks, ``exp_id`` from
``rllm.trainer.experiment_name``, ``model_id`` from ``model.name`` or ``'default'``), ``fit_async``'s
``initialize()`` and ``shutdown()``. The backend, rollout engine, gateway and training loop are left out.
"""


class UnifiedTrainer:
    def __init__(self, config):
        self.config = config
        self.rllm_config = config.rllm
        self._remote_runtime = None
        remote_runtime_cfg = self.rllm_config.get("remote_runtime", {})
        if remote_runtime_cfg.get("enabled", False):
            from rllm.engine.remote_runtime import RemoteRuntimeConfig, create_remote_runtime

            remote_runtime_config = RemoteRuntimeConfig(
                enabled=True,
                backend=remote_runtime_cfg.get("backend", "agentcore"),
                agentcore=dict(remote_runtime_cfg.get("agentcore", {})),
                harbor=dict(remote_runtime_cfg.get("harbor", {})),
                session_timeout=remote_runtime_cfg.get("session_timeout", 900.0),
            )
            self._remote_runtime = create_remote_runtime(
                remote_runtime_config,
                exp_id=self.rllm_config.trainer.experiment_name,
                model_id=self.config.get("model", {}).get("name", "default"),
            )

    async def fit_async(self):
        if self._remote_runtime is not None:
            self._remote_runtime.initialize()

    def shutdown(self):
        if self._remote_runtime is not None:
            self._remote_runtime.shutdown()
            self._remote_runtime = None
