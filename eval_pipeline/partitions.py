"""One dynamic partition per batch file (``demo0201``, ``demo0202`` ...)."""

import dagster as dg

BATCHES_PARTITION = "batches"

batches_partitions_def = dg.DynamicPartitionsDefinition(name=BATCHES_PARTITION)
