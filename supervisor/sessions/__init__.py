"""The master's database sessions, used by the master's loop and by its services alike: database
(the master's own session, reconnected behind the loop's back), loop_session (every wait
bounded by a deadline, so no turn of the loop waits on the network for more than a moment) and
pending (statements sent without waiting for their results). Imports nothing of master/ or
services/.
"""
