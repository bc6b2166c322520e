"""A module for fork-server tests to preload: it records which process imported it."""

import os

IMPORTED_BY = os.getpid()
