"""A faithful local server of the Compliance API (see README.md in this folder).

It shares no code with ``compliance_api``: passing against it must mean working against the
real service, so it is written from the specification and the published schemas alone.
"""
