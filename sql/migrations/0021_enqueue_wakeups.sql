-- Enqueue without a NOTIFY per transaction (issue 20). NOTIFY takes a database-wide lock at
-- commit, held across the commit record's flush, so every enqueue transaction that notified
-- committed one after another: 16 concurrent producers reached a quarter of a plain INSERT.
--
-- A master records here, per queue it serves, that it has a child asleep waiting for that
-- queue's wake-up (wanted). The first enqueue of a due job to the queue takes the flag (sets
-- wanted back to false) and sends the one NOTIFY; the enqueues after it find the flag down and
-- send none, until the master, having woken a child, raises it again for the children still
-- asleep. So the NOTIFYs follow the wake-ups the masters can use, not the jobs. A flag row
-- another enqueue holds (its transaction has taken it and will notify at its commit) is
-- skipped, never waited for: an enqueue never queues behind another's open transaction.
-- The poll (poll_interval) remains the safety net: an enqueue whose statement read the flag
-- just before a master raised it, and committed after the child's claim that followed, is seen
-- at that child's next claim, within one poll interval (docs/enqueue_wakeups.md).
--
-- A small table updated in place (wanted is in no index, so the updates are HOT); rows of a
-- supervisor go with it (unregister, prune). No change to pgq.jobs.
CREATE TABLE pgq.queue_wakeups (
    queue          text        NOT NULL,
    supervisor_id  text        NOT NULL,
    wanted         boolean     NOT NULL DEFAULT true,
    PRIMARY KEY (queue, supervisor_id)
) WITH (fillfactor = 50);

-- Takes every raised flag of the queue that no other transaction holds (SKIP LOCKED: never
-- waits) and, when it took one, NOTIFYs pgq_jobs with the queue, delivered at commit. Returns
-- whether it notified. The enqueues call it only after an index probe found a raised flag, so
-- the common case (flags down: children busy, or none listening) costs that probe alone, not an
-- UPDATE. PL/pgSQL, so its plans are kept for the session.
CREATE FUNCTION pgq.take_wakeups(queue text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    UPDATE pgq.queue_wakeups AS w
    SET wanted = false
    WHERE (w.queue, w.supervisor_id) IN (
        SELECT f.queue, f.supervisor_id
        FROM pgq.queue_wakeups AS f
        WHERE f.queue = take_wakeups.queue
          AND f.wanted
        FOR UPDATE SKIP LOCKED
    );
    IF FOUND THEN
        PERFORM pg_notify('pgq_jobs', take_wakeups.queue);
    END IF;
    RETURN FOUND;
END;
$$;

-- pgq.enqueue as in 0005, but a due job takes the queue's raised flags (as the enqueue statement
-- of sql/queries.sql does) and notifies only when it took one.
CREATE OR REPLACE FUNCTION pgq.enqueue(
    kind          text,
    args          jsonb       DEFAULT '{}',
    queue         text        DEFAULT 'default',
    priority      integer     DEFAULT 0,
    run_at        timestamptz DEFAULT NULL,
    max_attempts  integer     DEFAULT 10,
    unique_key    text        DEFAULT NULL
)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
-- Inside statements on pgq.jobs a bare name is the column; the arguments are named enqueue.x.
#variable_conflict use_column
DECLARE
    job_id  bigint;
    size    integer;
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
    LOOP
        -- A job due later waits as 'scheduled', outside the claim index (0004), and wakes the
        -- masters' stagers; a job due now wakes its queue's workers.
        INSERT INTO pgq.jobs AS j (queue, kind, args, priority, run_at, state, max_attempts,
                                   unique_key)
        VALUES (enqueue.queue, enqueue.kind, enqueue.args, enqueue.priority,
                coalesce(enqueue.run_at, now()),
                CASE WHEN enqueue.run_at > now() THEN 'scheduled' ELSE 'available' END,
                enqueue.max_attempts, enqueue.unique_key)
        ON CONFLICT (unique_key)
            WHERE unique_key IS NOT NULL AND state IN ('available', 'running', 'scheduled')
        DO NOTHING
        RETURNING j.id INTO job_id;
        IF job_id IS NOT NULL THEN
            IF enqueue.run_at > now() THEN
                PERFORM pg_notify('pgq_scheduled', '');
            ELSE
                IF EXISTS (SELECT FROM pgq.queue_wakeups AS f
                           WHERE f.queue = enqueue.queue AND f.wanted) THEN
                    PERFORM pgq.take_wakeups(enqueue.queue);
                END IF;
            END IF;
            RETURN job_id;
        END IF;
        SELECT j.id INTO job_id
        FROM pgq.jobs AS j
        WHERE j.unique_key = enqueue.unique_key
          AND j.state IN ('available', 'running', 'scheduled');
        IF job_id IS NOT NULL THEN
            RETURN job_id;
        END IF;
        -- The holder of the key finished between the insert and the look-up: try again.
    END LOOP;
END;
$$;
