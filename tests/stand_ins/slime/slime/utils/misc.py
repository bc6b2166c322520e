"""Stand-in for ``slime/utils/misc.py``'s ``load_function``: import ``module.attr`` from a dotted path."""

import importlib


def load_function(path: str):
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)
