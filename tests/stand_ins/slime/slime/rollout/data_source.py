"""Stand-in for ``slime/rollout/data_source.py``'s ``RolloutDataSource.get_samples`` (see ../README.md)."""

import copy

from slime.utils.types import Sample


class RolloutDataSource:
    """Hands out prompts as groups of ``n_samples_per_prompt`` deep copies with running group/sample indices."""

    def __init__(self, args, prompts: list[Sample]) -> None:
        self.args = args
        self.prompts = prompts
        self.offset = 0
        self.sample_group_index = 0
        self.sample_index = 0

    def get_samples(self, num_samples: int) -> list[list[Sample]]:
        groups = []
        for _ in range(num_samples):
            prompt = self.prompts[self.offset % len(self.prompts)]
            self.offset += 1
            group = []
            for _ in range(self.args.n_samples_per_prompt):
                sample = copy.deepcopy(prompt)
                sample.group_index = self.sample_group_index
                sample.index = self.sample_index
                self.sample_index += 1
                group.append(sample)
            self.sample_group_index += 1
            groups.append(group)
        return groups
