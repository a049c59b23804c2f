-- Job control: cancelled jobs, cancel requests for running jobs, paused queues, and an enqueue
-- function any client can call.
--
-- A waiting job that is cancelled goes straight to 'cancelled' (it keeps finished_at and is
-- purged with the dead letters). A running job cannot be changed under its owner's fence, so a
-- cancel marks it with cancel_requested_at; the master running it stops it, and every write
-- that ends the claim (settle, requeue after a kill, rescue) turns a requested cancel into
-- 'cancelled' instead of a retry.

-- Every state of every issue that adds one: 'scheduled' (jobs waiting for a future run_at,
-- from 0004) and 'cancelled' (here). Written in full so it is right whichever lands first.
ALTER TABLE pgq.jobs DROP CONSTRAINT jobs_state_check;
ALTER TABLE pgq.jobs ADD CONSTRAINT jobs_state_check
    CHECK (state IN ('available', 'running', 'discarded', 'scheduled', 'cancelled'));

ALTER TABLE pgq.jobs ADD COLUMN cancel_requested_at timestamptz;

-- Cancelled jobs are kept like dead letters: listed by finish time, purged in bounded batches.
CREATE INDEX jobs_cancelled ON pgq.jobs (finished_at)
    WHERE state = 'cancelled';

-- The masters look for cancel requests on their children's jobs every second; only running
-- jobs with a request are indexed, so the look-up reads an index that is almost always empty.
CREATE INDEX jobs_cancel_requests ON pgq.jobs (locked_by)
    WHERE cancel_requested_at IS NOT NULL AND state = 'running';

-- A paused queue has a row here. The claim checks it by primary key once per statement, so
-- every host skips a paused queue from its next claim on, and the pause survives restarts.
CREATE TABLE pgq.queue_pauses (
    queue       text        PRIMARY KEY,
    paused_at   timestamptz NOT NULL DEFAULT now(),
    paused_by   text        NOT NULL DEFAULT current_user
);

ALTER TABLE pgq.job_history DROP CONSTRAINT job_history_outcome_check;
ALTER TABLE pgq.job_history ADD CONSTRAINT job_history_outcome_check
    CHECK (outcome IN ('completed', 'discarded', 'cancelled'));

-- Enqueue from any client (psql, Ruby, Go, a trigger) inside the caller's transaction, with
-- the checks of the Python enqueue (supervisor/queue/enqueue.py) and the same row: a test
-- enqueues through both and compares. Returns the job's id, or the id of the job already
-- holding unique_key. Wakes idle workers at commit when the job is due now.
CREATE FUNCTION pgq.enqueue(
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
                PERFORM pg_notify('pgq_jobs', enqueue.queue);
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
