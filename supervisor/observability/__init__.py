"""What the supervisor tells its operators: logs, and metrics and health served on HTTP.

The metrics read a view the master hands them (view.py); they import nothing of the master.
"""
