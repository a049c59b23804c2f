-- Tenants (issue 22): whose job it is, inside its queue. Claims share a queue fairly among the
-- tenants that have due work (sql/queries.sql, claim); jobs without a tenant (null) form one
-- tenant of their own. A tenant is any short printable text: a customer, an endpoint.
--
-- Cheap on a big live table: a nullable column without a default rewrites no row, and the
-- check is NOT VALID, so it holds for every new row without scanning the old ones (which are
-- all null). The claim index over tenants comes in 0011.

ALTER TABLE pgq.jobs ADD COLUMN tenant text;
ALTER TABLE pgq.jobs ADD CONSTRAINT jobs_tenant_check
    CHECK (tenant IS NULL OR char_length(tenant) BETWEEN 1 AND 200) NOT VALID;

-- pgq.enqueue gains `tenant => ...`. A new parameter makes a new function signature, so the old
-- one is dropped first: two overloads would make every call by name ambiguous.
-- (an older signature of pgq.enqueue was dropped here: sql/functions/enqueue.sql)

-- Enqueue from any client (psql, Ruby, Go, a trigger) inside the caller's transaction, with
-- the checks of the Python enqueue (supervisor/queue/enqueue.py) and the same row: a test
-- enqueues through both and compares. Returns the job's id, or the id of the job already
-- holding unique_key. Wakes idle workers at commit when the job is due now.
-- pgq.enqueue: its definition is sql/functions/enqueue.sql (applied after the migrations).
