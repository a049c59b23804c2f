-- pgq.enqueue returns the id of the job holding the key when that job is unknown (issue 30):
-- 0036's function with the arbiter clause and the holder look-up of 0041 (an unknown job holds
-- its key). Without the look-up's 'unknown', a key held by an unknown job inserted nothing and
-- found no holder, and the loop below would try again forever. Same signature, so CREATE OR
-- REPLACE keeps callers and grants. 0040's migration tool is dropped: 0041 was its only caller.

DROP PROCEDURE pgq.index_history_by_id();

-- pgq.enqueue: its definition from here on is sql/functions/enqueue.sql (applied after the migrations).
