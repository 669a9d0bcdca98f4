"""Prefect tasks: one API operation each (or one Prefect-side step, such as saving a checkpoint),
so the UI shows every call as a step with its own state. No logic beyond the call: flows and the
engines decide what to send. One module per API resource, plus ``token``, ``events`` and
``flow_runs``.
"""
