"""Test configuration: a deterministic hypothesis profile and single-threaded torch.

CI runs on 2 cores; one torch thread per process keeps timings stable and avoids
oversubscription when joblib starts worker processes.
"""

import os

import torch
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    max_examples=50,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", deadline=None, max_examples=200)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

torch.set_num_threads(1)
