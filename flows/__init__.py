"""The runbooks operators run: one module per job, each with its ``@flow`` (and, for writes, its
``WriteJob``); docs/architecture.md says how to add one.
"""
