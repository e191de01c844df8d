"""The evaluation pipeline's Dagster code; assembled in :mod:`.definitions`."""
