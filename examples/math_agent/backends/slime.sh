python train.py "$@" \
    --rollout-function-path trainer_client.backends.slime.generate_rollout \
    --custom-reward-post-process-path trainer_client.backends.slime.post_process_rewards \
    --custom-config-path examples/math_agent/backends/slime_agentcore.yaml
# With --eval-interval, slime evaluates through --eval-function-path, which defaults to the rollout function:
# generate_rollout does not evaluate (it raises NotImplementedError at the first evaluation, before training),
# so also pass --eval-function-path slime.rollout.sglang_rollout.generate_rollout and
# --custom-generate-function-path trainer_client.backends.slime.generate (slime's loop, one rollout of ours each).
