python -m examples.math_agent.backends.rllm_train "$@" \
    +model.name=Qwen/Qwen2.5-1.5B-Instruct \
    rllm.remote_runtime.enabled=true \
    rllm.remote_runtime.backend=agentcore_events \
    +rllm.remote_runtime.agentcore.experiment=gsm8k-grpo-1 \
    rllm.remote_runtime.session_timeout=900
