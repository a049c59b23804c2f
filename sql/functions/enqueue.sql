-- pgq.enqueue: its current definition (applied by migrate after the numbered
-- migrations, whenever this file changes; see sql/functions/README.md).
-- Last changed with 0070 (a unique key goes with an order key: a follower holds it, issue 33);
-- before it, 0069 (a debounce replaces its key's follower still waiting), 0066 (order_key =>
-- text), 0064 (debounce => interval), 0042 (an unknown job holds its key: its holder is
-- returned).

-- The signatures it had before: two overloads would make every call by name
-- ambiguous, so a database still holding one loses it here.
DROP FUNCTION IF EXISTS pgq.enqueue(text, jsonb, text, integer, timestamptz, integer, text);
DROP FUNCTION IF EXISTS pgq.enqueue(text, jsonb, text, integer, timestamptz, integer, text, text);
DROP FUNCTION IF EXISTS pgq.enqueue(text, jsonb, text, integer, timestamptz, integer, text, text, text);
DROP FUNCTION IF EXISTS pgq.enqueue(text, jsonb, text, integer, timestamptz, integer, text, text, text,
                                    interval);

CREATE OR REPLACE FUNCTION pgq.enqueue(
    kind          text,
    args          jsonb       DEFAULT '{}',
    queue         text        DEFAULT 'default',
    priority      integer     DEFAULT 0,
    run_at        timestamptz DEFAULT NULL,
    max_attempts  integer     DEFAULT 10,
    unique_key    text        DEFAULT NULL,
    tenant        text        DEFAULT NULL,
    traceparent   text        DEFAULT NULL,
    debounce      interval    DEFAULT NULL,
    order_key     text        DEFAULT NULL
)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
-- Inside statements on pgq.jobs a bare name is the column; the arguments are named enqueue.x.
#variable_conflict use_column
DECLARE
    job_id   bigint;
    size     integer;
    -- With an order key: whether the job waits behind its key's head, and (debounce) whether
    -- the upsert inserted a job rather than replacing one.
    follows  boolean := false;
    fresh    boolean := true;
    -- A debounce that replaced a follower of its key still waiting: nothing to wake.
    behind   boolean := false;
BEGIN
    IF kind IS NULL OR btrim(kind) = '' THEN
        RAISE EXCEPTION 'pgq.enqueue: kind must not be empty' USING ERRCODE = '22023';
    END IF;
    IF char_length(kind) > 200 THEN
        RAISE EXCEPTION 'pgq.enqueue: kind is % characters long; the limit is 200',
            char_length(kind) USING ERRCODE = '22023';
    END IF;
    IF queue IS NULL OR btrim(queue) = '' THEN
        RAISE EXCEPTION 'pgq.enqueue: job %: queue must not be empty', quote_literal(kind)
            USING ERRCODE = '22023';
    END IF;
    IF char_length(queue) > 200 THEN
        RAISE EXCEPTION 'pgq.enqueue: job %: queue is % characters long; the limit is 200',
            quote_literal(kind), char_length(queue) USING ERRCODE = '22023';
    END IF;
    IF args IS NULL OR jsonb_typeof(args) <> 'object' THEN
        RAISE EXCEPTION 'pgq.enqueue: job %: args must be a JSON object, not %',
            quote_literal(kind), coalesce(jsonb_typeof(args), 'null') USING ERRCODE = '22023';
    END IF;
    size := octet_length(args::text);
    IF size > 262144 THEN
        RAISE EXCEPTION 'pgq.enqueue: job %: args are % bytes of JSON; the limit is 262144 bytes',
            quote_literal(kind), size USING ERRCODE = '22023';
    END IF;
    IF priority IS NULL OR priority NOT BETWEEN -32768 AND 32767 THEN
        RAISE EXCEPTION 'pgq.enqueue: job %: priority % is outside -32768..32767',
            quote_literal(kind), priority USING ERRCODE = '22023';
    END IF;
    IF max_attempts IS NULL OR max_attempts < 1 THEN
        RAISE EXCEPTION 'pgq.enqueue: job %: max_attempts must be at least 1, got %',
            quote_literal(kind), max_attempts USING ERRCODE = '22023';
    END IF;
    IF unique_key IS NOT NULL AND (btrim(unique_key) = '' OR char_length(unique_key) > 200) THEN
        RAISE EXCEPTION 'pgq.enqueue: job %: unique_key must be 1 to 200 characters',
            quote_literal(kind) USING ERRCODE = '22023';
    END IF;
    IF traceparent IS NOT NULL
       AND traceparent !~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$' THEN
        RAISE EXCEPTION 'pgq.enqueue: job %: traceparent must be a W3C trace context, got %',
            quote_literal(kind), quote_literal(left(traceparent, 80)) USING ERRCODE = '22023';
    END IF;
    IF tenant IS NOT NULL AND (btrim(tenant) = '' OR char_length(tenant) > 200
                               OR tenant ~ '[[:cntrl:]]') THEN
        RAISE EXCEPTION 'pgq.enqueue: job %: tenant must be 1 to 200 printable characters',
            quote_literal(kind) USING ERRCODE = '22023';
    END IF;
    IF order_key IS NOT NULL AND (btrim(order_key) = '' OR char_length(order_key) > 200) THEN
        RAISE EXCEPTION 'pgq.enqueue: job %: order_key must be 1 to 200 characters',
            quote_literal(kind) USING ERRCODE = '22023';
    END IF;
    IF order_key IS NOT NULL THEN
        -- The key's row first (0066): its lock orders this enqueue among the key's other
        -- producers and its endings, and the count says whether a job of the key is unfinished.
        -- A new key's head_id is filled in once the job has its id (pgq.order_head, below).
        INSERT INTO pgq.order_keys AS o (queue, key, unfinished, head_id)
        VALUES (enqueue.queue, enqueue.order_key, 1, 0)
        ON CONFLICT (queue, key) DO UPDATE SET unfinished = o.unfinished + 1
        RETURNING o.unfinished > 1 INTO follows;
    END IF;
    IF debounce IS NOT NULL THEN
        IF unique_key IS NULL THEN
            RAISE EXCEPTION 'pgq.enqueue: job %: debounce needs a unique_key (the key it debounces)',
                quote_literal(kind) USING ERRCODE = '22023';
        END IF;
        IF run_at IS NOT NULL THEN
            RAISE EXCEPTION 'pgq.enqueue: job %: give debounce or run_at, not both',
                quote_literal(kind) USING ERRCODE = '22023';
        END IF;
        IF debounce < interval '0' OR debounce > interval '100 years' THEN
            RAISE EXCEPTION 'pgq.enqueue: job %: debounce must be zero to a century, got %',
                quote_literal(kind), debounce USING ERRCODE = '22023';
        END IF;
        -- One statement: a concurrent debounce of the same key waits on the row's lock and
        -- then updates it, or inserts when the row it waited for has started meanwhile.
        -- The job it replaces has not started, so it is its key's head if it has an order key
        -- (followers wait outside the arbiter's index): it keeps its place, and the count
        -- taken above for a new job is given back below. A new job that would follow its key
        -- is written 'waiting', which the arbiter's index does not hold, so the insert would
        -- not meet the waiting head: the head is looked for first (the key's row lock, held,
        -- orders this among the key's producers).
        IF follows THEN
            UPDATE pgq.jobs AS j
            SET args = enqueue.args,
                run_at = now() + debounce,
                state = CASE WHEN debounce > interval '0' THEN 'scheduled' ELSE 'available' END
            WHERE j.debounce_key = enqueue.unique_key
              AND j.state IN ('available', 'scheduled')
              AND j.started_at IS NULL
            RETURNING j.id, false INTO job_id, fresh;
            IF job_id IS NULL THEN
                -- A follower of this key debounced with this key, still waiting behind its
                -- head (0069): replaced where it stands (its id, so its place in the key), due
                -- debounce after now once released. The key's row lock, held, orders this among
                -- the key's producers, so two debounces at once leave one follower.
                UPDATE pgq.jobs AS j
                SET args = enqueue.args,
                    run_at = now() + debounce
                WHERE j.id = (SELECT w.id
                              FROM pgq.jobs AS w
                              WHERE w.debounce_key = enqueue.unique_key
                                AND w.state = 'waiting'
                                AND w.queue = enqueue.queue
                                AND w.order_key = enqueue.order_key
                              ORDER BY w.id
                              LIMIT 1)
                  AND j.state = 'waiting'
                RETURNING j.id, false, true INTO job_id, fresh, behind;
            END IF;
        END IF;
        IF job_id IS NULL THEN
            -- xmax is 0 in the row an upsert inserted, a lock's xid in one it updated.
            INSERT INTO pgq.jobs AS j (queue, kind, args, priority, run_at, state, max_attempts,
                                       debounce_key, tenant, traceparent, order_key)
            VALUES (enqueue.queue, enqueue.kind, enqueue.args, enqueue.priority,
                    now() + debounce,
                    CASE WHEN follows THEN 'waiting'
                         WHEN debounce > interval '0' THEN 'scheduled' ELSE 'available' END,
                    enqueue.max_attempts, enqueue.unique_key, enqueue.tenant, enqueue.traceparent,
                    enqueue.order_key)
            ON CONFLICT (debounce_key)
                WHERE debounce_key IS NOT NULL AND state IN ('available', 'scheduled')
                  AND started_at IS NULL
            DO UPDATE SET args = EXCLUDED.args, run_at = EXCLUDED.run_at,
                          state = CASE WHEN debounce > interval '0' THEN 'scheduled'
                                       ELSE 'available' END
            RETURNING j.id, j.xmax = 0 INTO job_id, fresh;
        END IF;
        IF order_key IS NOT NULL AND NOT fresh THEN
            -- It replaced a job: nothing new in the key, which is woken for as usual below
            -- (unless the job replaced still waits behind its key's head).
            PERFORM pgq.order_unjoin(enqueue.queue, enqueue.order_key);
            IF behind THEN
                RETURN job_id;
            END IF;
        ELSIF order_key IS NOT NULL AND NOT follows THEN
            PERFORM pgq.order_head(enqueue.queue, enqueue.order_key, job_id);
        ELSIF follows THEN
            -- A new follower: nothing to wake until its key's head ends.
            RETURN job_id;
        END IF;
        IF debounce > interval '0' THEN
            IF pgq.wakes_stagers(now() + debounce) THEN
                PERFORM pg_notify('pgq_scheduled', '');
            END IF;
        ELSE
            PERFORM pgq.take_wakeups(enqueue.queue);
        END IF;
        RETURN job_id;
    END IF;
    LOOP
        -- A job due later waits as 'scheduled', outside the claim index (0004), and wakes the
        -- masters' stagers; a job due now wakes its queue's workers.
        -- A follower waits as 'waiting' (0066) until its key's earlier jobs have ended.
        INSERT INTO pgq.jobs AS j (queue, kind, args, priority, run_at, state, max_attempts,
                                   unique_key, tenant, traceparent, order_key)
        VALUES (enqueue.queue, enqueue.kind, enqueue.args, enqueue.priority,
                coalesce(enqueue.run_at, now()),
                CASE WHEN follows THEN 'waiting'
                     WHEN enqueue.run_at > now() THEN 'scheduled' ELSE 'available' END,
                enqueue.max_attempts, enqueue.unique_key, enqueue.tenant, enqueue.traceparent,
                enqueue.order_key)
        -- `id > 0` (always true) makes both unique indexes the arbiters (0041 says why).
        ON CONFLICT (unique_key)
            WHERE unique_key IS NOT NULL AND state IN ('available', 'running', 'scheduled')
              AND id > 0
        DO NOTHING
        RETURNING j.id INTO job_id;
        IF job_id IS NOT NULL THEN
            IF follows THEN
                RETURN job_id;
            END IF;
            IF order_key IS NOT NULL THEN
                PERFORM pgq.order_head(enqueue.queue, enqueue.order_key, job_id);
            END IF;
            IF enqueue.run_at > now() THEN
                IF pgq.wakes_stagers(enqueue.run_at) THEN
                    PERFORM pg_notify('pgq_scheduled', '');
                END IF;
            -- A due job wakes its queue only while a master has raised its wake-up flag
            -- (0021_enqueue_wakeups: no NOTIFY, and so no commit lock, in every transaction).
            ELSE
                PERFORM pgq.take_wakeups(enqueue.queue);
            END IF;
            RETURN job_id;
        END IF;
        -- 'waiting': a follower of an order key holds its unique key too (0070).
        SELECT j.id INTO job_id
        FROM pgq.jobs AS j
        WHERE j.unique_key = enqueue.unique_key
          AND j.state IN ('available', 'running', 'scheduled', 'unknown', 'waiting')
          AND j.id > 0;
        IF job_id IS NOT NULL THEN
            IF order_key IS NOT NULL THEN
                -- Nothing inserted: the count taken on the key goes back (0066).
                PERFORM pgq.order_unjoin(enqueue.queue, enqueue.order_key);
            END IF;
            RETURN job_id;
        END IF;
        -- The holder of the key finished between the insert and the look-up: try again.
    END LOOP;
END;
$$;
