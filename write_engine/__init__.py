"""The engine every write flow shares: ``run.run_write_job`` with a ``run.WriteJob``; around it
``inputs``, ``outcomes``, ``reporting``, ``approval``, ``send_record`` and ``link_ledger``.
"""
