"""Test-suite settings shared by every directory.

Property-based tests (hypothesis) are derandomised by default: every run of the suite, CI's
included, draws the same examples, so a red run is reproducible and never a coin flip that blocks
a landing. Exploration is random: ``KGEVAL_SLOW=1`` (the exploration profiles of the fuzz and
property tests) or ``KGEVAL_FUZZ_EXAMPLES=N`` select the ``kgeval-explore`` profile, and a
counterexample found there becomes an explicit regression case next to the property.
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("kgeval-ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("kgeval-explore", derandomize=False, print_blob=True)
_EXPLORE = os.environ.get("KGEVAL_SLOW") == "1" or bool(os.environ.get("KGEVAL_FUZZ_EXAMPLES", "").strip())
settings.load_profile("kgeval-explore" if _EXPLORE else "kgeval-ci")
