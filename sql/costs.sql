-- What attempts cost (issue 34, docs/job-cost.md; table pgq.attempt_costs, migration 0056).

-- name: job_costs
-- Every recorded attempt of job %(id)s, in order.
SELECT attempt, outcome, cpu_seconds, peak_memory, finished_at
FROM pgq.attempt_costs
WHERE job_id = %(id)s
ORDER BY attempt, finished_at;

-- name: cost_by_kind
-- CPU seconds, peak memory and attempts per kind over the last %(seconds)s seconds, the most
-- CPU first.
SELECT kind,
       count(*) AS attempts,
       sum(cpu_seconds) AS cpu_seconds,
       max(peak_memory) AS peak_memory
FROM pgq.attempt_costs
WHERE finished_at > now() - make_interval(secs => %(seconds)s::float8)
GROUP BY kind
ORDER BY sum(cpu_seconds) DESC, kind
LIMIT %(limit)s;

-- name: cost_by_tenant
-- CPU seconds and attempts per queue and tenant over the last %(seconds)s seconds (jobs without
-- a tenant are the tenant ''), the most CPU first.
SELECT queue,
       coalesce(tenant, '') AS tenant,
       count(*) AS attempts,
       sum(cpu_seconds) AS cpu_seconds
FROM pgq.attempt_costs
WHERE finished_at > now() - make_interval(secs => %(seconds)s::float8)
GROUP BY queue, coalesce(tenant, '')
ORDER BY sum(cpu_seconds) DESC, queue, tenant
LIMIT %(limit)s;

-- name: purge_costs
-- Deletes up to %(limit)s attempt costs recorded before %(older_than)s.
DELETE FROM pgq.attempt_costs
WHERE ctid = ANY (ARRAY(
    SELECT ctid
    FROM pgq.attempt_costs
    WHERE finished_at < %(older_than)s
    LIMIT %(limit)s
));

-- name: metrics_cost_by_kind
-- For /metrics (sent as plain text on the stats session): CPU seconds and attempts per kind
-- over the last hour, the 20 costliest.
SELECT kind, count(*) AS attempts, sum(cpu_seconds) AS cpu_seconds
FROM pgq.attempt_costs
WHERE finished_at > now() - interval '1 hour'
GROUP BY kind
ORDER BY sum(cpu_seconds) DESC, kind
LIMIT 20;

-- name: metrics_cost_by_tenant
-- For /metrics: CPU seconds per queue and tenant over the last hour, the 20 costliest.
SELECT queue, coalesce(tenant, '') AS tenant, sum(cpu_seconds) AS cpu_seconds
FROM pgq.attempt_costs
WHERE finished_at > now() - interval '1 hour'
GROUP BY queue, coalesce(tenant, '')
ORDER BY sum(cpu_seconds) DESC, queue, tenant
LIMIT 20;
