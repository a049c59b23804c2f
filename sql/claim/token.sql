-- name: token
-- One fresh fencing token for the whole batch; (id, lease_id) is the fence of each job.
SELECT nextval('pgq.lease_seq') AS lease_id
