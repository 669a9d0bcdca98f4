"""Redelivering events that an event-triggered deployment never reacted to.

Prefect's trigger service can drop an event: on SQLite, a burst makes its evaluation fail with
"database is locked" (it tries three times, then gives up) or its run-deployment action fail
with a 503, and a server restart forgets events not yet evaluated. The deployment then never
gets its run and nothing says so.

``flows/redeliver_missed_events.py`` closes that gap on a schedule: for every automation that
starts one deployment run per event (``automations.py``), it compares the events the automation
covers with the runs it started (``prefect.automation.action.executed`` events) and sends each
missed event again as a copy under a new id, so Prefect matches it, renders the parameters and
starts the run as it would have. Each redelivery is recorded as an event (``ledger.py``), which
bounds the attempts and reports an event that still has no run (``plan.py``).
"""
