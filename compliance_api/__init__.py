"""Plain-Python client for the Compliance API (models, settings, errors, tokens); no Prefect."""
