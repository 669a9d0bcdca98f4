"""Running the project: what ``prefect.yaml`` relies on and what starts it.

``bootstrap`` creates the server resources (``resources``: work pool, variables, checkpoints;
``automations``: the automations declared in ``automations.yaml``); ``stack`` starts sandbox,
Prefect server, bootstrap, ``prefect deploy`` and workers as ``make serve`` (``serve``) and
``make demo`` (``demo``) use them; ``prefect_server``, ``server_settings`` and ``database`` say
how the Prefect server runs.
"""
