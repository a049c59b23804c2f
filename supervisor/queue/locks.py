"""Advisory lock keys, in one place so no two tasks ever share one by accident."""

MIGRATE = 0x70677101
RESCUE = 0x70677102
PURGE = 0x70677103
VACUUM = 0x70677104
