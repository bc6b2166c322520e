"""Fixtures of the trainer tests: one moto server per test session (per xdist worker), reset before each test.

Cheaper than starting moto's in-process mock for every test, and the clients talk HTTP to it as they do to AWS.
The fixtures and the helpers the tests import are in ``trainer_support.py`` (a name no other test directory
uses), so test files elsewhere (``tests/ml``) can import the same fixtures.
"""

from trainer_support import aws_env, backend, client, descriptor, fast_poll, moto_url  # noqa: F401
