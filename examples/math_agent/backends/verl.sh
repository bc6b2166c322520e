python -m verl.trainer.main_ppo "$@" \
    actor_rollout_ref.rollout.mode=async \
    actor_rollout_ref.rollout.agent.agent_loop_config_path=examples/math_agent/backends/verl_agent_loop.yaml \
    actor_rollout_ref.rollout.agent.default_agent_loop=agentcore
