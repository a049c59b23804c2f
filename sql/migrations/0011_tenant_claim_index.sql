-- pgq:no-transaction
-- The claim index over tenants (issue 22): inside a queue, the jobs of each tenant in claim
-- order, so the claim can rotate between the tenants that have due work with one index probe
-- per tenant it visits, however many tenants wait and however many jobs each holds.
--
-- Jobs without a tenant are the tenant '' (the empty text, which no tenant may be: 0010's check
-- and every enqueue path refuse it). The key is compared byte by byte (COLLATE "C"), the order
-- Python's str comparison gives, so a child can tell where its rotation stopped from the
-- tenants it was handed, whatever the database's collation.
--
-- jobs_claim stays: supervisors of the previous release still claim through it during a rolling
-- upgrade, and the dashboard lists a queue's jobs in priority order through it. Built
-- concurrently, so enqueues and claims go on during the build; only available jobs are written
-- into it, so its size is the backlog's.
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_claim_tenant ON pgq.jobs
    (queue, (coalesce(tenant, '') COLLATE "C"), priority DESC, run_at, id)
    WHERE state = 'available';
