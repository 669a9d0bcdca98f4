"""What tasks and flows run on under Prefect: the client, its shared token, retries, locks.

Entry points: ``connection.compliance_client()`` (a data client whose token comes from the
shared broker), ``credentials`` (the Compliance Credentials block and ``load_run_settings()``,
the settings of a run), ``retries`` (why the client's retries are a call's only ones; the
options of API tasks), ``token_backends`` (the Prefect-backed rate limit, token store and token
lock), ``locks`` (mutual exclusion by name across machines), ``events.EventSink`` (events the
server has accepted), ``task_inputs.unwalked`` (large task arguments without Prefect walking
them) and ``form`` (how flow parameters look in the UI's run form).
"""
