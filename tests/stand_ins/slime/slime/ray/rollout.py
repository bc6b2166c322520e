"""Stand-in for ``slime/ray/rollout.py``'s ``RolloutManager``: one rollout step, then its training data.

Without Ray, servers or tracking: the manager builds its data source (``--data-source-path``) and loads the
rollout function (``--rollout-function-path``) and reward post-processing as slime does; :meth:`generate`
runs ``_get_rollout_data`` (the compact-rollout ``rollout_id`` check, then flattening) and
``_convert_samples_to_train_data``: group reward normalisation, ``rollout_id`` filling, loss-mask checks
(``remove_sample`` zeroes it), per-rollout mask sums, rollout log probs, and the top-p replay check that
slime's PR #2167 made unconditional when ``rollout_top_p != 1.0``. The per-rank split is left out.
"""

import itertools

import torch

from slime.observability.rollout_data_utils import validate_rollout_id_annotated
from slime.rollout.base_types import call_rollout_fn
from slime.utils.data import get_source
from slime.utils.misc import load_function
from slime.utils.types import Sample


class RolloutManager:
    def __init__(self, args):
        self.args = args
        self.data_source = load_function(args.data_source_path)(args)
        self.generate_rollout = load_function(args.rollout_function_path)
        self.eval_generate_rollout = load_function(args.eval_function_path)
        self.custom_reward_post_process_func = None
        if args.custom_reward_post_process_path is not None:
            self.custom_reward_post_process_func = load_function(args.custom_reward_post_process_path)

    def generate(self, rollout_id):
        data, metrics = self._get_rollout_data(rollout_id)
        return self._convert_samples_to_train_data(data), metrics

    def eval(self, rollout_id):
        return call_rollout_fn(self.eval_generate_rollout, self.args, rollout_id, self.data_source, evaluation=True)

    def _get_rollout_data(self, rollout_id):
        output = call_rollout_fn(self.generate_rollout, self.args, rollout_id, self.data_source, evaluation=False)
        data = output.samples
        validate_rollout_id_annotated(data)
        while isinstance(data[0], list):
            data = list(itertools.chain.from_iterable(data))
        return data, output.metrics

    def _post_process_rewards(self, samples):
        if self.custom_reward_post_process_func is not None:
            return self.custom_reward_post_process_func(self.args, samples)
        raw_rewards = [sample.get_reward_value(self.args) for sample in samples]
        if (
            self.args.advantage_estimator in ["grpo", "gspo", "cispo", "reinforce_plus_plus_baseline"]
            and self.args.rewards_normalization
        ):
            rewards = torch.tensor(raw_rewards, dtype=torch.float)
            if rewards.shape[-1] == self.args.n_samples_per_prompt * self.args.rollout_batch_size:
                rewards = rewards.reshape(-1, self.args.n_samples_per_prompt)
            else:
                rewards = rewards.view(-1, rewards.shape[-1])
            rewards = rewards - rewards.mean(dim=-1, keepdim=True)
            if self.args.advantage_estimator in ["grpo", "gspo", "cispo"] and self.args.grpo_std_normalization:
                rewards = rewards / (rewards.std(dim=-1, keepdim=True) + 1e-6)
            return raw_rewards, rewards.flatten().tolist()
        return raw_rewards, raw_rewards

    def _convert_samples_to_train_data(self, samples):
        raw_rewards, rewards = self._post_process_rewards(samples)
        assert len(raw_rewards) == len(samples) == len(rewards)
        rollout_ids = [sample.rollout_id for sample in samples]
        taken = {rid for rid in rollout_ids if rid is not None}
        next_id = 0
        for i, rid in enumerate(rollout_ids):
            if rid is None:
                while next_id in taken:
                    next_id += 1
                rollout_ids[i] = next_id
                taken.add(next_id)
        train_data = {
            "tokens": [sample.tokens for sample in samples],
            "response_lengths": [sample.response_length for sample in samples],
            "rewards": rewards,
            "raw_reward": raw_rewards,
            "truncated": [1 if sample.status == Sample.Status.TRUNCATED else 0 for sample in samples],
            "sample_indices": [sample.index for sample in samples],
            "rollout_ids": rollout_ids,
        }
        loss_masks = []
        for sample in samples:
            if sample.loss_mask is None:
                sample.loss_mask = [1] * sample.response_length
            assert len(sample.loss_mask) == sample.response_length, (
                f"loss mask length {len(sample.loss_mask)} != response length {sample.response_length}"
            )
            if sample.remove_sample:
                sample.loss_mask = [0] * sample.response_length
            loss_masks.append(sample.loss_mask)
        train_data["loss_masks"] = loss_masks
        totals = {}
        for rid, mask in zip(rollout_ids, loss_masks, strict=True):
            totals[rid] = totals.get(rid, 0) + sum(mask)
        train_data["rollout_mask_sums"] = [totals[rid] for rid in rollout_ids]
        if samples[0].rollout_log_probs is not None:
            train_data["rollout_log_probs"] = [sample.rollout_log_probs for sample in samples]
        if getattr(self.args, "rollout_top_p", 1.0) != 1.0:
            for sample in samples:
                assert sample.rollout_top_p_token_ids is not None
                assert sample.rollout_top_p_token_offsets is not None
                assert len(sample.rollout_top_p_token_offsets) == sample.response_length + 1
                assert int(sample.rollout_top_p_token_offsets[-1]) == len(sample.rollout_top_p_token_ids)
            train_data["rollout_top_p_token_ids"] = [sample.rollout_top_p_token_ids for sample in samples]
            train_data["rollout_top_p_token_offsets"] = [sample.rollout_top_p_token_offsets for sample in samples]
        if samples[0].train_metadata is not None:
            train_data["metadata"] = [sample.train_metadata for sample in samples]
        if samples[0].teacher_log_probs is not None:
            train_data["teacher_log_probs"] = [sample.teacher_log_probs for sample in samples]
        if samples[0].metadata is not None:
            train_data["source_names"] = [get_source(sample) for sample in samples]
        return train_data
