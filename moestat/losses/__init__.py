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
from moestat.losses.voronoi_spec import (
    BlockSpec,
    ExponentTable,
    LossSpec,
    builtin_spec,
    cell_terms_from_spec,
    spec_from_mapping,
    voronoi_loss_from_spec,
)

__all__ = [
    "BlockSpec",
    "EXPONENT_TABLES",
    "ExponentTable",
    "LossSpec",
    "builtin_spec",
    "cell_terms_from_spec",
    "spec_from_mapping",
    "voronoi_loss_from_spec",
    "cell_parameter_errors",
    "cell_sizes",
    "cell_terms",
    "direction_only",
    "regression_l2_error",
    "voronoi_cells",
    "voronoi_loss",
]
