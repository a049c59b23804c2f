"""`pgq-supervisor doctor`: what holds the database back, who, and how to fix it.

One module per family of checks (horizon, vacuum, claim, pressure, headroom, replication), each
turning what the database says (sql/doctor.sql) into ``Check`` values; ``runner`` bounds each
family by a statement timeout and reports one that timed out or could not see as such. The horizon's
judgement is a pure function of one JSON document, so the master's metrics and /readyz, the
`status` verb and the dashboard reuse it on their own connections.
"""

from supervisor.doctor.check import Check, Status, worst

__all__ = ["Check", "Status", "worst"]
