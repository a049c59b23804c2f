-- Each child's memory in the registry, for the web dashboard's workers page (every host's
-- children in one place). The master records the child's resident set size at each heartbeat: a
-- read of /proc/<pid>/statm, cheap enough for every child every 5 s, where USS (what the limits
-- measure) walks the page tables. RSS also counts pages the child shares with the master, so it
-- shows growth, not what a restart would free.

ALTER TABLE pgq.workers ADD COLUMN rss_bytes bigint;
