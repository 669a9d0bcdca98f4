"""What the read flows compute: checked filters, classifications, digests, tables, events.

Entry points: ``filters`` (flow parameters checked before the first call), ``freshness``
(is a knowledge-base item still trustworthy), ``connector_digests`` (what to do about
vulnerabilities and training), ``tables`` (bounded report rows and artifacts) and ``events``
(events for items someone must act on).
"""
