"""The runbooks operators run: one module per job, each with its ``@flow`` (and, for writes, its
``WriteJob``). Flows say what to do; ``write_engine/``, ``audit_log/`` and ``read_reports/`` do
it the same way for all of them. The table in README.md lists them with their deployments;
docs/architecture.md says how to add one.
"""
