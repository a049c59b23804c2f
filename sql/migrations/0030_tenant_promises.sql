-- Per-tenant rates promise each waiting claim a token of its own, as the queue-wide rate does
-- (0013's limit_take_tokens): before this, a claim that every tenant's rate held back was told
-- the soonest token of any of the queue's tenant buckets, the same one for every waiting claim,
-- so all the waiting children woke together for it and all but one claimed nothing.
--
-- tenant_room, when a tenant's rate holds it back in this claim, notes that tenant's first
-- token due after the queue's last promise (a transaction-local setting, one per queue: the
-- soonest of the tenants held back); tenant_wait, called by limit_finish when the claim took
-- nothing, promises that token to this claim and returns the seconds until it is due. The next
-- claim held back is told a later token, so waiting children wake one at a time: a claim takes
-- every token due when it runs, of every tenant, so two tenants whose tokens fall due together
-- wake one child, not two. Only a tenant that this claim's walk stepped over for its rate can
-- be promised: one without work, or at its concurrency cap, never wakes anyone.
--
-- A token that comes due while the claim runs (between the walk and its end) gives a wait of 0:
-- the child claims again at once. 0013's tenant_wait skipped such a token (it dropped every due
-- time already past, so that a stale bucket would not wake a child in a loop), and with nothing
-- else to wait for the child slept its whole poll interval.
--
-- Every function keeps its signature and the claim statement is unchanged: supervisors of the
-- previous release call the same functions and get the same behaviour during a rolling upgrade.
-- A claim running while this commits may take its walk's tenant_room from before and its
-- tenant_wait from after: it finds no note and sleeps one poll interval, once.

-- The setting that carries a queue's note through one claim's transaction (a queue name can be
-- any text; a setting's name must be identifiers).
-- pgq.tenant_note_name: its definition is sql/functions/tenant_note_name.sql (applied after the migrations).

-- pgq.tenant_room: its definition is sql/functions/tenant_room.sql (applied after the migrations).

-- Seconds until the token noted by this claim's walk (tenant_room above) is due, promising it
-- to this claim; null when no tenant was held back by its rate (nothing to wait for but a slot
-- or new work). 0 when it came due meanwhile.
-- pgq.tenant_wait: its definition is sql/functions/tenant_wait.sql (applied after the migrations).

-- 0013's, clearing each limited queue's note first: a claim starts with none, even when an
-- earlier claim ran in the same transaction.
-- pgq.limit_take_all: its definition is sql/functions/limit_take_all.sql (applied after the migrations).
