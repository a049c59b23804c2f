"""What both sides of the fork share: board (the shared-memory status a child writes and the
master reads), exits (exit codes and reasons), memory (what a child really uses), proctitle."""
