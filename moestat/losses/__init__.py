"""Losses between fitted and true mixing measures: generic Voronoi losses and the regression error."""

from moestat.losses.regression_l2 import regression_l2_error
from moestat.losses.voronoi import (
    EXPONENT_TABLES,
    cell_parameter_errors,
    cell_sizes,
    cell_terms,
    direction_only,
    voronoi_cells,
    voronoi_loss,
)

__all__ = [
    "EXPONENT_TABLES",
    "cell_parameter_errors",
    "cell_sizes",
    "cell_terms",
    "direction_only",
    "regression_l2_error",
    "voronoi_cells",
    "voronoi_loss",
]
