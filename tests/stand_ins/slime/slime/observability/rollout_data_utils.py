"""Stand-in for ``slime/observability/rollout_data_utils.py``: ``validate_rollout_id_annotated`` only."""

from slime.utils.types import Sample


def validate_rollout_id_annotated(node, depth=0):
    """A leaf ``list[Sample]`` at depth >= 2 (one rollout split into several samples, e.g. ``list[list[list[
    Sample]]]``) must have ``rollout_id`` set on every sibling, all equal; the default ``list[list[Sample]]``
    is not checked."""
    if isinstance(node, Sample):
        return
    assert isinstance(node, list), f"unexpected rollout output node type: {type(node).__name__}"
    if node and isinstance(node[0], Sample):
        if depth >= 2 and len(node) > 1:
            ids = [sample.rollout_id for sample in node]
            missing = [i for i, rollout_id in enumerate(ids) if rollout_id is None]
            assert not missing, f"Compact rollout returned {len(node)} samples but rollout_id is unset on {missing}"
            assert len(set(ids)) == 1, f"Sibling samples from one compact rollout must share rollout_id; got {ids}."
        return
    for item in node:
        validate_rollout_id_annotated(item, depth + 1)
