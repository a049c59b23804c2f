-- pgq.tenant_note_name: its current definition (applied by migrate after the numbered
-- migrations, whenever this file changes; see sql/functions/README.md).
-- Last changed by migration 0030 before the functions had files of their own.
--
-- The setting that carries a queue's note through one claim's transaction (a queue name can be
-- any text; a setting's name must be identifiers).

CREATE OR REPLACE FUNCTION pgq.tenant_note_name(p_queue text)
RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT 'pgq_held.q' || md5(p_queue)
$$;
