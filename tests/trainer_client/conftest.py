"""Fixtures of the trainer tests: moto in-process, empty at each test's start (a moto server on request, for a
test that starts a trainer process; it serves the same state).

In-process, a call costs about half of its CPU over HTTP to a moto server (D86). The fixtures and the helpers the
tests import are in ``trainer_support.py`` (a name no other test directory uses), so test files elsewhere
(``tests/ml``) can import the same fixtures.
"""

from trainer_support import aws_env, backend, client, descriptor, fast_poll, moto_url  # noqa: F401
