"""Plain-Python client for the Compliance API: models, settings, errors and token logic.

Nothing in this package imports Prefect, so it can be used from any program.
"""
