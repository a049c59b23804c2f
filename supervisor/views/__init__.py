"""What both the command line and the dashboard show: the `status` report (status) and its parts
(limits, schedules), the server's clock (clock), and the plain-text formatting they and the
doctor share (text). Below cli/ and web/: imports neither, so the master, which runs the
doctor's checks, loads nothing of the command line.
"""
