"""Reading the audit log exactly once: checkpoints, paging, entry-to-event naming, day files.

Entry points: ``reading.iter_new_pages`` (pages after a checkpoint, deduplicated),
``checkpoints`` (where a reader resumes, and the run lock), ``events.audit_event`` (one Prefect
event per entry, with a deterministic id) and ``jsonl_export.DayFileExport`` (the export's
files). The bridge and export flows in ``flows/`` put them together.
"""
