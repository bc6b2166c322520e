"""Stand-in for ``slime/utils/dp_schedule.py``: ``build_dp_schedule``, how slime splits a step's training data
into training steps, data-parallel ranks and micro-batches.

Steps are ``global_batch_size`` ROLLOUTS (samples grouped by ``rollout_indices``, in first-seen order; the
samples of one rollout stay in one step; trailing rollouts that do not fill a step are dropped). Each step's
samples are packed into micro-batches (first-fit by ``max_tokens_per_gpu * cp_size`` with
``use_dynamic_batch_size``, else chunks of ``micro_batch_size``), whose count must be a multiple of
``dp_size`` (times the micro-batch group under virtual pipelining): the dynamic path splits the largest bins
to get there, the static path raises. Micro-batches go to ranks round-robin; ``balance_data`` (and
``balance_by_flops``, which need slime's FLOPs estimate) are left out.
"""


def _first_fit_pack(lengths, max_per_bin):
    bins, sums = [], []
    for index, length in enumerate(lengths):
        for j in range(len(bins)):
            if sums[j] + length <= max_per_bin:
                bins[j].append(index)
                sums[j] += length
                break
        else:
            bins.append([index])
            sums.append(length)
    return bins


def _split_bin(indices, lengths):
    halves, sums = [[], []], [0, 0]
    for index in sorted(indices, key=lambda i: -lengths[i]):
        half = 0 if sums[0] <= sums[1] else 1
        halves[half].append(index)
        sums[half] += lengths[index]
    return halves


def _expand_bins(bins, target, lengths):
    while len(bins) < target:
        candidates = [(sum(lengths[i] for i in b), k) for k, b in enumerate(bins) if len(b) > 1]
        if not candidates:
            break
        _, k = max(candidates)
        bins[k], right = _split_bin(bins[k], lengths)
        bins.append(right)


def build_dp_schedule(args, train_parallel_config, total_lengths, *, global_batch_size, rollout_indices):
    """``(partitions, micro_batch_indices, num_microbatches, global_batch_sizes)``: per rank its global sample
    indices and its micro-batches (local indices), per step the micro-batches per rank and the rollout count."""
    if args.balance_data or getattr(args, "balance_by_flops", False):
        raise NotImplementedError("the stand-in distributes micro-batches round-robin only")
    dp_size = train_parallel_config["dp_size"]
    vpp_size = train_parallel_config["vpp_size"]
    mb_group = train_parallel_config["microbatch_group_size_per_vp_stage"]
    align_to = dp_size * (mb_group if vpp_size > 1 else 1)
    max_per_bin = args.max_tokens_per_gpu * train_parallel_config["cp_size"] if args.use_dynamic_batch_size else None
    by_rollout = {}
    for position, rollout in enumerate(rollout_indices):
        by_rollout.setdefault(rollout, []).append(position)
    rollouts = list(by_rollout)
    num_steps = len(rollouts) // global_batch_size
    assert num_steps >= 1, f"num_rollouts ({len(rollouts)}) < global_batch_size ({global_batch_size})"
    partitions = [[] for _ in range(dp_size)]
    micro_batch_indices = [[] for _ in range(dp_size)]
    num_microbatches, global_batch_sizes = [], []
    for step in range(num_steps):
        step_rollouts = rollouts[step * global_batch_size : (step + 1) * global_batch_size]
        indices = [position for rollout in step_rollouts for position in by_rollout[rollout]]
        lengths = [total_lengths[i] for i in indices]
        global_batch_sizes.append(global_batch_size)
        assert len(indices) >= dp_size, f"step {step}: {len(indices)} samples < dp_size {dp_size}"
        if args.use_dynamic_batch_size:
            bins = _first_fit_pack(lengths, max_per_bin)
        else:
            size = args.micro_batch_size
            bins = [list(range(i, min(i + size, len(lengths)))) for i in range(0, len(lengths), size)]
        target = max(-(-len(bins) // align_to) * align_to, align_to)
        if target != len(bins):
            if not args.use_dynamic_batch_size:
                raise AssertionError(
                    f"static path: num_mbs ({len(bins)}) is not a multiple of dp_size * mb_group ({align_to}); "
                    f"got step_size={len(indices)}, micro_batch_size={args.micro_batch_size}"
                )
            _expand_bins(bins, target, lengths)
            assert len(bins) == target, f"dynamic path: could only produce {len(bins)} mbs; need {target}"
        num_microbatches.append(len(bins) // dp_size)
        for rank in range(dp_size):
            for k in range(rank, len(bins), dp_size):
                start = len(partitions[rank])
                partitions[rank].extend(indices[i] for i in bins[k])
                micro_batch_indices[rank].append(list(range(start, start + len(bins[k]))))
    return partitions, micro_batch_indices, num_microbatches, global_batch_sizes
