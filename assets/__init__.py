"""Software-defined assets, one module (or subpackage) per pattern family."""

import warnings

import dagster as dg

# Single-run backfill policies are what Spark assets need (one session for a range), and
# the parameter is still marked beta in this Dagster: said once here, not on every load.
warnings.filterwarnings("ignore", message="Parameter `backfill_policy`", category=dg.BetaWarning)
