"""Stand-in for ``slime/rollout/data_source.py``: ``RolloutDataSource(args)`` and its buffered subclass.

As in slime, the data source loads its own tokenizer (``--hf-checkpoint``) and prompt data
(``--prompt-data``, ``--input-key``, ``--label-key``, ...) when ``rollout_global_dataset`` is on (the
default), and hands out ``n`` groups of ``n_samples_per_prompt`` deep copies with running indices.
Checkpoint ``save``/``load`` of its offsets are left out.
"""

import copy

from slime.utils.data import Dataset
from slime.utils.misc import load_function
from slime.utils.processing_utils import load_processor, load_tokenizer
from slime.utils.types import Sample


class RolloutDataSource:
    def __init__(self, args):
        self.args = args
        self.epoch_id = 0
        self.sample_group_index = 0
        self.sample_index = 0
        self.sample_offset = 0
        self.metadata = {}
        if args.rollout_global_dataset and args.prompt_data is not None:
            tokenizer = load_tokenizer(args.hf_checkpoint, trust_remote_code=True)
            processor = load_processor(args.hf_checkpoint, trust_remote_code=True)
            self.dataset = Dataset(
                args.prompt_data,
                tokenizer=tokenizer,
                processor=processor,
                max_length=args.rollout_max_prompt_len,
                prompt_key=args.input_key,
                multimodal_keys=args.multimodal_keys,
                label_key=args.label_key,
                metadata_key=args.metadata_key,
                tool_key=args.tool_key,
                apply_chat_template=args.apply_chat_template,
                apply_chat_template_kwargs=args.apply_chat_template_kwargs,
                seed=args.rollout_seed,
            )
            if args.rollout_shuffle:
                self.dataset.shuffle(self.epoch_id)
        else:
            self.dataset = None

    def get_samples(self, num_samples):
        if self.dataset is None:
            prompt_samples = [Sample() for _ in range(num_samples)]
        elif self.sample_offset + num_samples <= len(self.dataset):
            prompt_samples = self.dataset.samples[self.sample_offset : self.sample_offset + num_samples]
            self.sample_offset += num_samples
        else:
            prompt_samples = self.dataset.samples[self.sample_offset :]
            num_samples -= len(prompt_samples)
            self.epoch_id += 1
            if self.args.rollout_shuffle:
                self.dataset.shuffle(self.epoch_id)
            prompt_samples += self.dataset.samples[:num_samples]
            self.sample_offset = num_samples
        groups = []
        for prompt_sample in prompt_samples:
            group = []
            for _ in range(self.args.n_samples_per_prompt):
                sample = copy.deepcopy(prompt_sample)
                sample.group_index = self.sample_group_index
                sample.index = self.sample_index
                self.sample_index += 1
                group.append(sample)
            self.sample_group_index += 1
            groups.append(group)
        return groups

    def __len__(self):
        return 0 if self.dataset is None else len(self.dataset)


class RolloutDataSourceWithBuffer(RolloutDataSource):
    """slime's default ``--data-source-path``: groups added back (partial rollouts) are handed out first."""

    def __init__(self, args):
        super().__init__(args)
        self.buffer = []
        self.buffer_filter = pop_first if args.buffer_filter_path is None else load_function(args.buffer_filter_path)

    def get_samples(self, num_samples):
        samples = self.buffer_filter(self.args, None, self.buffer, num_samples) if self.buffer and num_samples else []
        num_samples -= len(samples)
        return samples if num_samples == 0 else samples + super().get_samples(num_samples)

    def add_samples(self, samples):
        for group in samples:
            assert len(group) == self.args.n_samples_per_prompt
            self.buffer.append(group)


def pop_first(args, rollout_id, buffer, num_samples):
    taken = buffer[: min(len(buffer), num_samples)]
    del buffer[: len(taken)]
    return taken
