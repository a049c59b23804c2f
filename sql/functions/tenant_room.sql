-- pgq.tenant_room: its current definition (applied by migrate after the numbered
-- migrations, whenever this file changes; see sql/functions/README.md).
-- Last changed by migration 0030 before the functions had files of their own.

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
