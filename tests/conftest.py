"""Shared test configuration: Hypothesis profiles.

``default`` keeps the everyday loop fast; ``fuzz`` (``make fuzz``) runs the same suites much
longer. Select with HYPOTHESIS_PROFILE.
"""

import os

from hypothesis import HealthCheck, settings

settings.register_profile("default", max_examples=100, deadline=None)
settings.register_profile(
    "fuzz",
    max_examples=5000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
