"""Running the project: ``bootstrap`` creates the server resources (``resources``,
``automations``); ``stack`` starts everything for ``make serve`` (``serve``) and ``make demo``
(``demo``); ``prefect_server``, ``server_settings`` and ``database`` run the Prefect server.
"""
