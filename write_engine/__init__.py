"""The engine every write flow shares: check the items, apply them, report, fail red.

Entry point: ``run.run_write_job(job, parsed, ...)`` with a ``run.WriteJob`` that says how one
unit of items is sent. Around it: ``inputs`` (read and check items before the first call),
``outcomes`` (what happened to each item), ``reporting`` (the UI's tables, progress and the
failed-items record reruns read), ``link_ledger`` (document links sent, so none goes twice) and
``collector`` (garbage-collector settings for bulk runs).
"""
