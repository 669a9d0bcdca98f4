"""What the read flows compute: ``filters`` (parameters checked before any call), ``freshness``,
``connector_digests``, ``tables`` (bounded rows, artifacts) and ``events`` (items to act on).
"""
