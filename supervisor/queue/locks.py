"""Advisory lock keys, in one place so no two tasks ever share one by accident."""

MIGRATE = 0x70677101
RESCUE = 0x70677102
PURGE = 0x70677103
VACUUM = 0x70677104
# Taken inside pgq.ensure_history_partitions (sql/migrations/0006, 0025): keep them in step.
HISTORY_PARTITIONS = 0x70677105
