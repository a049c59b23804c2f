"""A child: the process the master forks to run jobs.

worker (the child's loop: claim, run, write) with execution (running one job) and weights (which
queue to claim from). A child imports nothing of supervisor.master or supervisor.services.
"""
