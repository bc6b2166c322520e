"""Stand-in of ``rllm.trainer.tinker.transform``: trajectories to Tinker ``Datum``s.

Rewritten from rLLM 9beb6e0f: advantages computed per group (unless the steps have some), then each trajectory's
steps merged while each prompt extends the sequence so far (the new prompt tokens logprob 0, advantage 0, mask 0;
the sampled tokens their logprobs, the step's advantage, mask 1), a step that does not extend it starting another
datum; a datum is tinker-cookbook's right-shifted input and left-shifted targets with ``target_tokens``,
``logprobs``, ``advantages`` and ``mask`` from the second position on. A malformed trajectory (a step without
logprobs) is dropped and counted in ``batch/dropped_malformed_sequences``.
"""

import logging

import tinker
from tinker.types.tensor_data import TensorData
from tinker_cookbook.supervised.common import create_rightshifted_model_input_and_leftshifted_targets

from rllm.engine.rollout.tinker_engine import _flat_token_input_length, _flat_token_input_to_model_input
from rllm.trainer.algorithms import collect_reward_and_advantage_from_trajectory_groups

logger = logging.getLogger(__name__)


def _flatten_token_input(token_input):
    flat = []
    for elem in token_input:
        flat.extend(elem.tokens if isinstance(elem, tinker.EncodedTextChunk) else [elem])
    return flat


def trajectory_to_datums(traj):
    data = []
    sequence, logprobs, advantages, mask = [], [], [], []

    def make_datum():
        model_input = _flat_token_input_to_model_input(sequence)
        inputs, targets = create_rightshifted_model_input_and_leftshifted_targets(list(model_input.chunks))
        assert inputs.length == len(targets) == len(logprobs) - 1
        return tinker.Datum(
            model_input=inputs,
            loss_fn_inputs={
                "target_tokens": TensorData(data=targets, dtype="int64"),
                "logprobs": TensorData(data=logprobs[1:], dtype="float32"),
                "advantages": TensorData(data=advantages[1:], dtype="float32"),
                "mask": TensorData(data=mask[1:], dtype="float32"),
            },
        )

    for step in traj.steps:
        prompt = _flatten_token_input(step.prompt_ids)
        assert len(step.logprobs) > 0, "output_logprobs is empty. Cannot build Tinker Datum for training."
        assert step.advantage is not None, "step.advantage is None: advantages were not computed"
        step_advantages = (
            step.advantage if isinstance(step.advantage, list) else [step.advantage] * len(step.response_ids)
        )
        if not sequence:
            delta = prompt
        elif len(sequence) <= len(prompt) and prompt[: len(sequence)] == sequence:
            delta = prompt[len(sequence) :]
        else:
            data.append(make_datum())
            sequence, logprobs, advantages, mask = [], [], [], []
            delta = prompt
        length = _flat_token_input_length(delta)
        sequence += delta + list(step.response_ids)
        logprobs += [0.0] * length + list(step.logprobs)
        advantages += [0.0] * length + step_advantages
        mask += [0.0] * length + [1.0] * len(step.response_ids)
    if sequence:
        data.append(make_datum())
    return data


def transform_trajectory_groups_to_datums(trajectory_groups, algorithm_config):
    has_advantages = any(s.advantage is not None for g in trajectory_groups for t in g.trajectories for s in t.steps)
    metrics = (
        {}
        if has_advantages
        else collect_reward_and_advantage_from_trajectory_groups(trajectory_groups, algorithm_config)
    )
    datums, dropped = [], 0
    for group in trajectory_groups:
        for index, trajectory in enumerate(group.trajectories):
            try:
                datums.extend(trajectory_to_datums(trajectory))
            except AssertionError as e:
                dropped += 1
                logger.warning(
                    "Dropping malformed training trajectory group_id=%s traj_idx=%d: %s", group.group_id, index, e
                )
    metrics["batch/dropped_malformed_sequences"] = dropped
    return datums, metrics
