-- name: quota
-- Each tenant visited gives its weighted share of the batch, rounded up (weights from the
-- YAML's `tenants:` in %(tenant_*)s, 1 when not listed). A tenant without room takes no share
-- (and no job: its LIMITs are 0). Not a WHERE: a filter here changes the row estimates, and
-- with them the pool's plan.
SELECT w.step, w.tenant, w.room, w.kp, w.kr, w.ki,
       least(w.room,
             ceil(%(limit)s * coalesce(tw.weight, 1)::float8
                  / sum(coalesce(tw.weight, 1)) FILTER (WHERE w.room > 0) OVER ())
       )::integer AS jobs
FROM walk AS w
LEFT JOIN unnest(%(tenant_queues)s::text[], %(tenant_names)s::text[],
                 %(tenant_weights)s::integer[]) AS tw(queue, tenant, weight)
    ON tw.queue = pool.queue
   AND tw.tenant = w.tenant
