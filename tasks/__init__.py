"""Prefect tasks: one API operation (or Prefect-side step) each, so the UI shows every call as a
step with its own state; no logic beyond the call. One module per API resource.
"""
