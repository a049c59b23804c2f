-- pgq:no-transaction
-- Running jobs by queue and tenant (0010; jobs without one are the tenant '', as in 0011's
-- jobs_claim_tenant), for the concurrency counts of the queue limits (0013): of a queue, and of
-- each of its tenants. Only running jobs are indexed, so it stays as small as the fleet's slots
-- whatever the backlog or the history; built concurrently, so enqueues and claims go on during
-- the build.
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_running ON pgq.jobs
    (queue, (coalesce(tenant, '') COLLATE "C"))
    WHERE state = 'running';
