"""Module-level caches of the metric code hand out shared arrays: they must be read-only and keyed
by everything that determines their values (a cache hit is never a different number)."""

import numpy as np
import pytest
from scipy.special import digamma, zeta

from kgeval.metrics import laplace
from kgeval.metrics.moments import log_power_prefix, power_prefix


def test_cached_prefix_sums_cannot_be_changed_in_place():
    p = power_prefix(0.5, 50)
    expected = np.cumsum(np.r_[0.0, np.arange(1, 51) ** 0.5])
    with pytest.raises(ValueError, match="read-only"):
        p[3] += 1.0
    np.testing.assert_allclose(power_prefix(0.5, 50), expected, rtol=1e-14)
    with pytest.raises(ValueError, match="read-only"):
        log_power_prefix(2, 20)[1:] = 0.0


def test_harmonic_cache_keys_on_shape_and_dtype_not_only_bytes():
    laplace._H_CACHE.clear()
    c = np.array([40.0, 50.0])
    h1 = laplace._harmonic(c, 1)
    np.testing.assert_allclose(h1, digamma(c + 1.0) + np.euler_gamma, rtol=1e-14)
    with pytest.raises(ValueError, match="read-only"):
        h1[0] = 0.0
    # the same 16 bytes as a (2, 1) column and as int64 ids: other arrays, other values
    col = laplace._harmonic(c.reshape(2, 1), 2)
    assert col.shape == (2, 1)
    np.testing.assert_allclose(col[:, 0], zeta(2.0) - zeta(2.0, c + 1.0), rtol=1e-14)
    as_int = c.view(np.int64)
    h_int = laplace._harmonic(as_int, 1)
    np.testing.assert_allclose(h_int, digamma(as_int + 1.0) + np.euler_gamma, rtol=1e-14)
    assert not np.allclose(h_int, h1)
