"""Nested subsamples drawn by rows' keys: the same rows on any backend and any chunking.

Every row i gets a key ``u_i``, uniform on [0, 1) and independent of the
others; the subsample of fraction f is the set of rows with ``u_i < f``.
Each row is then in it with probability f, independently (Bernoulli
sampling: about ``f n`` rows), and the subsample of a smaller fraction is a
subset of the larger: one read of the data that keeps the rows of the
largest fraction, with their keys, serves every smaller one.

The keys come in seed blocks of ``SEED_BLOCK`` rows, each from its own
generator seeded by ``(seed, block index)``, so a worker draws the keys of
its rows without anything of size n on the client, and the draw depends on
the fit's seed and the rows' indices only, not on how the rows are chunked.
A draw over rows ``lo:hi`` generates the keys of the seed blocks they
touch: O(hi - lo + SEED_BLOCK) work, done where the rows are read.
"""

import functools
import numbers

import numpy as np
from sklearn.utils import check_random_state

__all__ = ["SEED_BLOCK", "NestedDraw", "first_draw", "nested_rows"]

# Rows per seed block: a block's keys come from the generator seeded by
# (seed, block index), whatever the chunks.
SEED_BLOCK = 1 << 16


def nested_rows(seed, n_samples, lo, hi, fraction):
    """Rows ``lo <= i < hi`` of ``n_samples`` whose key (module docstring) is below ``fraction``.

    Returns ``(rows, keys)``: the rows' indices (int64, increasing) and
    their keys. ``seed`` is a non-negative integer; the result for rows
    ``lo:hi`` is that of ``0:n_samples`` restricted to them.
    """
    fraction = np.float32(fraction)
    indices, keys = [], []
    for block in range(lo // SEED_BLOCK, -(-hi // SEED_BLOCK)):
        start = block * SEED_BLOCK
        rows = min(SEED_BLOCK, n_samples - start)
        # float32 keys: half the work of float64; a grid of 2^-24 is far
        # finer than any fraction a fit asks for.
        key = np.random.default_rng([seed, block]).random(rows, dtype=np.float32)
        pos = np.flatnonzero(key < fraction)
        key = key[pos]
        pos = pos + start
        inside = (pos >= lo) & (pos < hi)
        indices.append(pos[inside])
        keys.append(key[inside])
    if not indices:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
    return np.concatenate(indices).astype(np.int64), np.concatenate(keys)


class NestedDraw:
    """One nested draw: its seed, its largest fraction, and what a backend kept of it.

    A rows object prepared with :meth:`prepare_subsamples` holds one, shared
    by its rescaled and centred copies, so the rows of the largest fraction
    are taken once (one read of Dask data) and every smaller subsample is
    the part of them whose keys are below its fraction. ``taken`` is the
    backend's: None until the first subsample.
    """

    def __init__(self, seed, fraction):
        self.seed = int(seed)
        self.fraction = float(fraction)
        self.taken = None


def first_draw(random_state, high):
    """``check_random_state(random_state).randint(high)``, an int's draw computed once per process.

    Building a RandomState from an int costs about 0.1 ms (NumPy seeds a
    fresh MT19937 before the legacy seeding), a twentieth of a default fit
    of 1000 rows; the draw depends on the int alone. A generator, or None
    (NumPy's global one), draws as before.
    """
    if isinstance(random_state, numbers.Integral):
        return _int_first_draw(int(random_state), high)
    return check_random_state(random_state).randint(high)


@functools.lru_cache(maxsize=64)
def _int_first_draw(seed, high):
    return np.random.RandomState(seed).randint(high)
