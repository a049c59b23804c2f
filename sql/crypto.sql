-- Named queries of encrypted arguments (supervisor/crypto): key rotation and key counts.
-- The same rules as every sql/*.sql file: a "-- name:" line, the description, the statement;
-- every value a parameter.
-- An envelope is {"$pgq_secret": {"key": ID, "ct": TEXT}} anywhere inside a job's args. The
-- paths are strict: lax mode's .** visits an array's items twice (each envelope counted twice).

-- name: rotate_jobs_scan
-- One slice of the rotation: the next %(scan)s jobs after id %(after)s by primary key (so a
-- slice's cost is bounded however few of them hold envelopes), returning those that hold an
-- envelope under a key other than %(key)s, and the last id looked at (the next slice's start).
WITH scanned AS (
    SELECT id, kind, args
    FROM pgq.jobs
    WHERE id > %(after)s::bigint
    ORDER BY id
    LIMIT %(scan)s::integer
)
SELECT id, kind, args, (SELECT max(id) FROM scanned) AS last_id
FROM scanned
WHERE jsonb_path_exists(args, 'strict $.** ? (@."$pgq_secret".key != $k)',
                        jsonb_build_object('k', %(key)s::text))
UNION ALL
-- The slice's end, even when no job in it needs rotating (kind and args null).
SELECT NULL, NULL, NULL, (SELECT max(id) FROM scanned)
ORDER BY 1 NULLS LAST;

-- name: rotate_jobs_write
-- Writes the re-sealed args of one slice, each only if the row still holds what was read
-- (a compare-and-set: an args changed meanwhile is left for the next run, never overwritten).
UPDATE pgq.jobs AS j
SET args = u.new
FROM unnest(%(ids)s::bigint[], %(old)s::jsonb[], %(new)s::jsonb[]) AS u(id, old, new)
WHERE j.id = u.id AND j.args = u.old
RETURNING j.id;

-- name: rotate_batches_scan
-- rotate_jobs_scan for the `then` jobs' args that batches keep until their members end.
WITH scanned AS (
    SELECT id, then_kind, then_args
    FROM pgq.batches
    WHERE id > %(after)s::bigint
    ORDER BY id
    LIMIT %(scan)s::integer
)
SELECT id, then_kind, then_args, (SELECT max(id) FROM scanned) AS last_id
FROM scanned
WHERE then_args IS NOT NULL
  AND jsonb_path_exists(then_args, 'strict $.** ? (@."$pgq_secret".key != $k)',
                        jsonb_build_object('k', %(key)s::text))
UNION ALL
SELECT NULL, NULL, NULL, (SELECT max(id) FROM scanned)
ORDER BY 1 NULLS LAST;

-- name: rotate_batches_write
-- rotate_jobs_write for pgq.batches.then_args.
UPDATE pgq.batches AS b
SET then_args = u.new
FROM unnest(%(ids)s::bigint[], %(old)s::jsonb[], %(new)s::jsonb[]) AS u(id, old, new)
WHERE b.id = u.id AND b.then_args = u.old
RETURNING b.id;

-- name: envelopes_by_key
-- How many envelopes each key id seals, in jobs and in batches' `then` jobs: what must be
-- rotated before a key can be dropped. A full read of both tables (an operator's question).
SELECT key_id, sum(n)::bigint AS envelopes
FROM (
    SELECT e #>> '{}' AS key_id, count(*) AS n
    FROM pgq.jobs, jsonb_path_query(args, 'strict $.** ? (exists(@."$pgq_secret"))."$pgq_secret".key') AS e
    GROUP BY 1
    UNION ALL
    SELECT e #>> '{}', count(*)
    FROM pgq.batches, jsonb_path_query(then_args, 'strict $.** ? (exists(@."$pgq_secret"))."$pgq_secret".key') AS e
    WHERE then_args IS NOT NULL
    GROUP BY 1
) AS counted
GROUP BY key_id
ORDER BY key_id;
