"""Dagster assets. Each is thin: it calls the domain modules and attaches metadata."""
