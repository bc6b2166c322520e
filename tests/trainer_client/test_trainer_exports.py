"""The public surface: ``__all__`` is sorted and matches what the package exports."""

import types

import trainer_client


def test_all_is_sorted_and_lists_every_public_name():
    # Subpackages (``trainer_client.backends``) appear as attributes once imported; they are not names to export.
    public = {
        name
        for name, value in vars(trainer_client).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert trainer_client.__all__ == sorted(trainer_client.__all__)
    assert set(trainer_client.__all__) == public


def test_every_error_belongs_to_the_rollout_error_family():
    errors = [getattr(trainer_client, n) for n in trainer_client.__all__ if n.endswith("Error")]
    assert all(issubclass(error, trainer_client.RolloutError) for error in errors)
    assert issubclass(trainer_client.SubmitError, trainer_client.DispatchError)
    assert issubclass(trainer_client.DispatchFailedError, trainer_client.DispatchError)
