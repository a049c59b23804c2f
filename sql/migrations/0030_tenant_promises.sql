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
CREATE FUNCTION pgq.tenant_note_name(p_queue text)
RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT 'pgq_held.q' || md5(p_queue)
$$;

CREATE OR REPLACE FUNCTION pgq.tenant_room(p_queue text, p_tenant text, p_want integer,
                                           p_finishing bigint[], p_finishing_leases bigint[])
RETURNS integer
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    l pgq.queue_limits%ROWTYPE;
    b pgq.limit_buckets%ROWTYPE;
    room integer := greatest(p_want, 0);
    running integer;
    at timestamptz;
    tokens float8;
    due timestamptz;
    last timestamptz;
    note text;
BEGIN
    SELECT * INTO l FROM pgq.queue_limits WHERE queue = p_queue;
    IF NOT FOUND OR room = 0 THEN
        RETURN room;
    END IF;
    IF l.tenant_concurrency IS NOT NULL THEN
        SELECT count(*) INTO running
        FROM pgq.jobs AS j
        WHERE j.state = 'running'
          AND j.queue = p_queue
          AND coalesce(j.tenant, '') COLLATE "C" = p_tenant
          AND NOT EXISTS (
              SELECT 1
              FROM unnest(p_finishing, p_finishing_leases) AS f(id, lease_id)
              WHERE f.id = j.id AND f.lease_id = j.lease_id
          );
        room := least(room, l.tenant_concurrency - running);
    END IF;
    IF room > 0 AND l.tenant_rate IS NOT NULL THEN
        SELECT * INTO b FROM pgq.limit_buckets
        WHERE queue = p_queue AND per = 'tenant' AND tenant = p_tenant;
        IF FOUND THEN
            at := clock_timestamp();
            tokens := least(l.tenant_burst::float8,
                            b.tokens + l.tenant_rate
                                * greatest(0, extract(epoch FROM at - b.refilled_at)));
            room := least(room, floor(tokens)::integer);
            IF room = 0 THEN
                -- Held back by its rate alone: its next token, unless a claim was already
                -- promised a moment at or after it; then its first token after that moment.
                -- A promise covers every tenant's tokens due by then (and within a
                -- millisecond after: tenants spent by one claim fall due together), since
                -- the claim woken for it takes them all. The last promise is the queue's,
                -- kept in the queue's bucket row when the queue has no rate of its own (that
                -- row's promises are then unused), and the tenant's own.
                IF l.rate IS NULL THEN
                    SELECT q.promised_at INTO last FROM pgq.limit_buckets AS q
                    WHERE q.queue = p_queue AND q.per = 'queue' AND q.tenant = '';
                END IF;
                last := greatest(last, b.promised_at)
                        + make_interval(secs => least(0.001, 0.25 / l.tenant_rate));
                due := b.refilled_at + make_interval(secs => (1.0 - b.tokens) / l.tenant_rate);
                IF last > at AND due <= last THEN
                    due := due + make_interval(secs => (floor(
                        extract(epoch FROM last - due) * l.tenant_rate) + 1) / l.tenant_rate);
                END IF;
                note := nullif(current_setting(pgq.tenant_note_name(p_queue), true), '');
                IF note IS NULL OR extract(epoch FROM due) < split_part(note, ' ', 1)::float8 THEN
                    PERFORM set_config(pgq.tenant_note_name(p_queue),
                                       extract(epoch FROM due)::text || ' ' || p_tenant, true);
                END IF;
            END IF;
        ELSE
            room := least(room, l.tenant_burst);
        END IF;
    END IF;
    RETURN greatest(room, 0);
END
$$;

-- Seconds until the token noted by this claim's walk (tenant_room above) is due, promising it
-- to this claim; null when no tenant was held back by its rate (nothing to wait for but a slot
-- or new work). 0 when it came due meanwhile.
CREATE OR REPLACE FUNCTION pgq.tenant_wait(p_queue text)
RETURNS float8
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    note text := nullif(current_setting(pgq.tenant_note_name(p_queue), true), '');
    due timestamptz;
BEGIN
    IF note IS NULL THEN
        RETURN NULL;
    END IF;
    due := to_timestamp(split_part(note, ' ', 1)::float8);
    UPDATE pgq.limit_buckets
    SET promised_at = due
    WHERE queue = p_queue AND per = 'tenant' AND tenant = substr(note, strpos(note, ' ') + 1);
    -- The queue's last promise (see tenant_room), when the queue has no rate of its own. Its row
    -- is the queue's mutex, which this claim holds (pgq.limit_take).
    UPDATE pgq.limit_buckets AS q
    SET promised_at = greatest(q.promised_at, due)
    FROM pgq.queue_limits AS l
    WHERE l.queue = p_queue AND l.rate IS NULL
      AND q.queue = p_queue AND q.per = 'queue' AND q.tenant = '';
    -- Promised once: a second call in this transaction finds nothing to wait for.
    PERFORM set_config(pgq.tenant_note_name(p_queue), '', true);
    RETURN greatest(0.0, extract(epoch FROM due - clock_timestamp()));
END
$$;

-- 0013's, clearing each limited queue's note first: a claim starts with none, even when an
-- earlier claim ran in the same transaction.
CREATE OR REPLACE FUNCTION pgq.limit_take_all(p_queues text[], p_want integer,
                                              p_finishing bigint[],
                                              p_finishing_leases bigint[])
RETURNS TABLE (queue text, allowed integer, wait float8, per_tenant boolean,
               tenant_rated boolean)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    l pgq.queue_limits%ROWTYPE;
BEGIN
    IF p_want <= 0 THEN
        RETURN;
    END IF;
    FOR l IN
        SELECT ql.*
        FROM pgq.queue_limits AS ql
        WHERE ql.queue = ANY(p_queues)
        ORDER BY ql.queue COLLATE "C"
    LOOP
        queue := l.queue;
        SELECT t.allowed, t.wait INTO allowed, wait
        FROM pgq.limit_take(l.queue, p_want, p_finishing, p_finishing_leases) AS t;
        per_tenant := l.tenant_concurrency IS NOT NULL OR l.tenant_rate IS NOT NULL;
        tenant_rated := l.tenant_rate IS NOT NULL;
        IF tenant_rated THEN
            PERFORM set_config(pgq.tenant_note_name(l.queue), '', true);
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;
