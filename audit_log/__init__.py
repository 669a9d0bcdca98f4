"""Reading the audit log exactly once: ``reading`` (pages after a checkpoint), ``checkpoints``,
``events`` (entry -> Prefect event), ``jsonl_export`` (day files), ``targets`` (write-flow work).
"""
