"""Hypothesis profiles: ``default`` keeps the fuzz suite to seconds in the normal test
run; ``HYPOTHESIS_PROFILE=long python -m pytest tests/fuzz`` runs many more cases."""

import os

from hypothesis import HealthCheck, settings

settings.register_profile("default", max_examples=40, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("long", max_examples=1500, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
