"""The UI's code location has a Phoenix source and sink exactly when
EVAL_PIPELINE_PHOENIX_URL is set; the key is an EnvVar, never a value in the config."""

from __future__ import annotations

import dagster as dg

from eval_pipeline.defs.pipeline.definitions import location_definitions
from eval_pipeline.defs.pipeline.resources import PhoenixResource


def _names(defs: dg.Definitions) -> tuple[set[str], set[str]]:
    graph = defs.resolve_asset_graph()
    return ({s.name for s in defs.sensors or []},
            {k.to_user_string() for k in graph.get_all_asset_keys()})


def test_without_phoenix_the_graph_is_the_file_pipeline(monkeypatch):
    monkeypatch.delenv("EVAL_PIPELINE_PHOENIX_URL", raising=False)
    sensors, assets = _names(location_definitions())
    assert "phoenix_sensor" not in sensors and "phoenix_annotations" not in assets


def test_with_phoenix_the_sensor_the_asset_and_the_resource(monkeypatch):
    monkeypatch.setenv("EVAL_PIPELINE_PHOENIX_URL", "http://127.0.0.1:6006")
    monkeypatch.setenv("EVAL_PIPELINE_PHOENIX_PROJECT", "my-agents")
    monkeypatch.setenv("PHOENIX_API_KEY", "phx-secret-value-123456")
    defs = location_definitions()
    sensors, assets = _names(defs)
    assert "phoenix_sensor" in sensors and "phoenix_annotations" in assets
    resource = defs.resources["phoenix"]
    assert isinstance(resource, PhoenixResource) and resource.project == "my-agents"
    # Bound to the variables, resolved only when a run or tick starts.
    assert isinstance(resource.api_key, dg.EnvVar) and resource.api_key == "PHOENIX_API_KEY"
    assert "phx-secret-value-123456" not in repr(resource)
    sensor = defs.resolve_sensor_def("phoenix_sensor")
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING
    assert sensor.job_name == "evaluate_batch"
