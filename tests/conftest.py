"""Fixtures shared by every test directory."""

from __future__ import annotations

import boto3
import pytest


@pytest.fixture(scope="session")
def boto_session() -> boto3.Session:
    """One boto3 session (us-east-1, fake credentials) for clients the tests make under ``mock_aws``.

    ``mock_aws`` gives boto3 a new default session per test, and every client of a new session parses its
    service model again (about 50 ms a client); this one parses each model once.
    """
    return boto3.Session(region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing")
