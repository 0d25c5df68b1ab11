"""Jinja templates, installed as the package `orchestrator.templates` (see pyproject.toml)."""
