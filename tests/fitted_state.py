"""Comparison of fitted states, for tests that two ways of fitting give one model."""

import dataclasses

import numpy as np


def same_state(a, b):
    """Whether two fitted states (``vars`` of estimators, and the values in
    them) hold the same names and the same numbers, dtypes and types."""
    if type(a) is not type(b):
        return False
    if isinstance(a, np.random.RandomState):  # (a stream's parameters hold it too)
        return same_state(list(a.get_state()), list(b.get_state()))
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_state(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(map(same_state, a, b))
    if dataclasses.is_dataclass(a):
        return all(
            same_state(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a)
        )
    if hasattr(a, "__dict__") and not callable(a):
        return same_state(vars(a), vars(b))
    return a == b
