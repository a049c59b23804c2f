-- An unknown job holds its unique key (issue 30), and 0041 builds the index that makes it so.
-- A database where the old rule already let a second job take an unknown job's key (a retried
-- request enqueuing `charge:ORDER` again while the first charge was being reconciled) cannot
-- hold that index: the build would fail on the duplicate. So this refuses first, naming every
-- such pair, and says how to resolve them; nothing is written. Read-only: only unknown jobs are
-- read (the small jobs_unknown index), and their holders by key (jobs_unique_key).
--
-- It also creates pgq.index_history_by_id, which 0041 calls to build the history's id index
-- one partition at a time (0009 used to build it inside its own transaction, which holds
-- pgq.jobs' exclusive lock from its ADD COLUMN: every enqueue, claim and completion waited for
-- the build of every history partition). 0042 drops it.
DO $$
DECLARE
    pairs text;
BEGIN
    SELECT string_agg(format('job %s (unknown) and job %s (%s)', u.id, h.id, h.state), '; '
                      ORDER BY u.id, h.id)
    INTO pairs
    FROM pgq.jobs AS u
    JOIN pgq.jobs AS h
      ON h.unique_key = u.unique_key
     AND (h.state IN ('available', 'running', 'scheduled')
          OR (h.state = 'unknown' AND h.id > u.id))
    WHERE u.state = 'unknown'
      AND u.unique_key IS NOT NULL;
    IF pairs IS NOT NULL THEN
        RAISE EXCEPTION 'an unknown job shares its unique key with another waiting, running or '
                        'unknown job: %', pairs
            USING ERRCODE = 'unique_violation',
                  HINT = 'resolve each unknown job first (pgq-supervisor jobs resolve ID --as '
                         'completed|discarded), or let the other job end, then run migrate again';
    END IF;
END
$$;

-- No SET search_path: a procedure with SET clauses may not COMMIT. Every name is qualified.
CREATE PROCEDURE pgq.index_history_by_id()
LANGUAGE plpgsql
AS $$
DECLARE
    part  regclass;
    name  text;
BEGIN
    -- On the parent only: a catalog entry, no build. It stays invalid until every partition's
    -- index is attached, and ATTACH PARTITION builds it on each new partition from then on.
    CREATE INDEX IF NOT EXISTS job_history_id ON ONLY pgq.job_history (id);
    COMMIT;
    FOR part IN
        SELECT i.inhrelid::regclass
        FROM pg_catalog.pg_inherits AS i
        WHERE i.inhparent = 'pgq.job_history'::regclass
          AND NOT EXISTS (
              SELECT 1
              FROM pg_catalog.pg_inherits AS x
              JOIN pg_catalog.pg_index AS ix ON ix.indexrelid = x.inhrelid
              WHERE x.inhparent = 'pgq.job_history_id'::regclass
                AND ix.indrelid = i.inhrelid)
        ORDER BY 1
    LOOP
        -- One partition per transaction: history writes wait only for the build of the
        -- partition they write to (a day's rows), and nothing else is locked meanwhile. A
        -- partition another transaction holds fails the call after 200 ms rather than queue
        -- every history write behind the build's wait; migrate tries again (as for any
        -- lock), and the partitions already indexed are skipped.
        PERFORM pg_catalog.set_config('lock_timeout', '200ms', true);
        name := (SELECT c.relname FROM pg_catalog.pg_class AS c WHERE c.oid = part) || '_id';
        EXECUTE pg_catalog.format('CREATE INDEX IF NOT EXISTS %I ON %s (id)', name, part);
        EXECUTE pg_catalog.format('ALTER INDEX pgq.job_history_id ATTACH PARTITION pgq.%I', name);
        COMMIT;
    END LOOP;
END;
$$;
