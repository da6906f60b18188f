"""Load manifest: a two-stage transform/load pipeline for enriched run directories,
coordinated by the Delta table `load_manifest` (after the Snowplow loaders): the shredder
stages a run's events by type, the loader loads staged runs into per-type warehouse
tables, and each step is a move of the run's manifest row, NEW -> PROCESSED -> LOADED."""
