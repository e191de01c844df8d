"""Arize Phoenix as a source of trajectories and a sink for their evaluations.

Agents traced into Phoenix (OpenInference spans over OTLP) are read from the Phoenix server,
one trajectory per complete trace, through the same span parser as span export files
(:mod:`eval_pipeline.formats.spans`); the evaluations go back as span annotations on the
spans they judge. Only the light ``arize-phoenix-client`` is used here (never the server's
``phoenix`` package, which pulls in the whole server), and nothing here imports Dagster:
:mod:`eval_pipeline.defs.pipeline.phoenix` wires it into the graph.

- :mod:`~eval_pipeline.phoenix.connection`: the client from a base URL and key, and the one
  line an unreachable server is reported in;
- :mod:`~eval_pipeline.phoenix.source`: new complete traces since a cursor, written as a
  span drop;
- :mod:`~eval_pipeline.phoenix.sink`: annotations logged back, synchronously.
"""
