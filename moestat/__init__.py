"""moestat: statistical simulation and estimation rates of Mixture-of-Experts models.

The package follows the pipeline: :mod:`moestat.model` (gates, experts, mixing measures, the
regression function, identifiability) -> :mod:`moestat.data` -> :mod:`moestat.estimators` ->
:mod:`moestat.losses` -> :mod:`moestat.rates`; beside it :mod:`moestat.nn` (neural layers with the
same gates) and :mod:`moestat.experiments`; :mod:`moestat.cli` is the ``moestat`` command.  The
model's names are re-exported here for convenience.
"""

from moestat.threads import configure_environment as _configure_environment

# Before torch loads: OpenMP threads wait passively (moestat.threads explains the measurements).
_configure_environment()

from moestat.devices import compile_cache_dirs as _compile_cache_dirs  # noqa: E402

# Before torch loads too: torch fixes TORCHINDUCTOR_CACHE_DIR to $TMPDIR/torchinductor_<user> the first
# time anything asks for it, so the user cache has to be named first (moestat.devices explains).
_compile_cache_dirs()

from moestat.model import *  # noqa: F401,F403 - the model's public names, listed in moestat.model.__all__
from moestat.model import __all__ as _model_all  # noqa: E402

__version__ = "0.1.0"

__all__ = [*_model_all, "__version__"]
