"""Real frameworks warn at import about their own dependencies; those warnings are not ours to fix."""

import pytest


def pytest_collection_modifyitems(items):
    for item in items:
        item.add_marker(pytest.mark.filterwarnings("ignore::DeprecationWarning"))
        item.add_marker(pytest.mark.filterwarnings("ignore::FutureWarning"))
        item.add_marker(pytest.mark.filterwarnings("ignore::UserWarning"))
