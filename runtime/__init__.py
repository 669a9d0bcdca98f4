"""What tasks and flows run on under Prefect: the client and its shared token (``connection``,
``credentials``, ``token_backends``), ``retries``, ``locks``, ``attempts``, ``events``,
``task_inputs``, ``collector`` and the UI's run form (``form``).
"""
