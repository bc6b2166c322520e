"""Stand-in of ``rllm.trainer.unified_trainer``: how ``UnifiedTrainer`` picks, starts and stops a remote runtime.

``UnifiedTrainer.__init__`` keeps rLLM's signature and what it does when ``rllm.remote_runtime.enabled``: the
backend built and asked for its rollout engine, a ``GatewayManager(config, mode="process" if backend_name ==
"verl" else "thread")``, the lazy import of the factory, the ``RemoteRuntimeConfig`` built from the config block
with the same fallbacks, ``exp_id=rllm.trainer.experiment_name``, ``model_id=config.get("model", {}).get("name",
"default")``. ``fit_async`` initializes the runtime, hands the backend's rollout engine to the gateway, runs the
first training batch (``rllm.data.train_batch_size`` rows, ``rllm.rollout.n`` rollouts each) through rLLM's
engine steps (``rllm_engine.run_one``), then shuts the runtime down. Training, validation, the workflow paths
and the logging are left out.

``AgentTrainer`` (rLLM's launcher) builds the trainer in this process on a backend that trains nothing; rLLM's
runs ``UnifiedTrainer`` with its ``VerlBackend`` in a Ray ``TaskRunner`` (verl) or in process (tinker).
"""

import asyncio


class UnifiedTrainer:
    def __init__(
        self,
        backend_cls,
        config,
        workflow_class=None,
        train_dataset=None,
        val_dataset=None,
        workflow_args=None,
        backend_args=None,
        **kwargs,
    ):
        self.config = config
        self.rllm_config = config.rllm
        self.train_dataset = train_dataset
        self.val_dataset = val_dataset
        self.backend = backend_cls(config=config, **(backend_args or {}))
        self.backend.validate_config()
        self.backend.init_rollout_engine()
        self._gateway = None
        self._remote_runtime = None
        remote_runtime_cfg = self.rllm_config.get("remote_runtime", {})
        if remote_runtime_cfg.get("enabled", False):
            from rllm.engine.remote_runtime import RemoteRuntimeConfig, create_remote_runtime
            from rllm.gateway.manager import GatewayManager

            gateway_mode = "process" if kwargs.get("backend_name") == "verl" else "thread"
            self._gateway = GatewayManager(self.config, mode=gateway_mode)
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
            self._session_timeout = remote_runtime_config.session_timeout

    def fit(self):
        asyncio.run(self.fit_async())

    async def fit_async(self):
        if self._remote_runtime is None:
            return
        from rllm_engine import run_one

        self._remote_runtime.initialize()
        try:
            self._gateway.start(self.backend.rollout_engine)
            rows = list(self.train_dataset or [])[: self.rllm_config.data.train_batch_size]
            await asyncio.gather(
                *(
                    run_one(self._remote_runtime, self._gateway, task, f"task-{index}", self._session_timeout)
                    for index, task in enumerate(rows)
                    for _ in range(self.rllm_config.rollout.n)
                )
            )
        finally:
            self.shutdown()

    def shutdown(self):
        if self._remote_runtime is not None:
            self._remote_runtime.shutdown()
            self._remote_runtime = None


class _RolloutEngine:
    def __init__(self, sampling_params):
        # rLLM's tinker and fireworks engines take rllm.rollout.{train,val} so; its VerlEngine takes verl's
        # actor_rollout_ref.rollout (temperature, top_k, top_p) plus logprobs=1
        self.train_sampling_params = dict(sampling_params.get("train", {}))
        self.val_sampling_params = dict(sampling_params.get("val", {}))


class _NoTrainingBackend:
    """A backend whose rollout engine has rLLM's per-mode sampling parameters and that trains nothing."""

    def __init__(self, config, **kwargs):
        self.config = config
        self.rollout_engine = None

    def validate_config(self):
        pass

    def init_rollout_engine(self, **kwargs):
        self.rollout_engine = _RolloutEngine(self.config.rllm.rollout)
        return self.rollout_engine


class AgentTrainer:
    def __init__(
        self,
        config,
        workflow_class=None,
        train_dataset=None,
        val_dataset=None,
        workflow_args=None,
        backend="verl",
        **kwargs,
    ):
        if backend not in ("verl", "tinker", "fireworks"):
            raise ValueError(f"Unsupported backend: {backend}")
        self.trainer = UnifiedTrainer(
            _NoTrainingBackend,
            config,
            workflow_class=workflow_class,
            train_dataset=train_dataset,
            val_dataset=val_dataset,
            workflow_args=workflow_args,
            backend_name=backend,
            **kwargs,
        )

    def train(self):
        self.trainer.fit()
