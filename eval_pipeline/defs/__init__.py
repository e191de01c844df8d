"""Dagster definitions, loaded by dg from this folder (``defs_module`` in pyproject.toml).

``pipeline/`` holds the evaluation pipeline: assets, automation, resources, the IO manager,
partitions and the definitions that assemble them. Files ``dg scaffold defs`` adds here are
loaded beside it. The domain packages (formats, preprocess, clips, judges, scoring, routing,
report) live outside this folder and import no Dagster.
"""
