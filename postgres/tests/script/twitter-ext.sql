-- Moves this database from atomflake's SQL script (prefix atomflake, in the current schema) to the
-- extension atomflake, in one transaction: nothing changes when a step is refused. Run it
-- with psql -v ON_ERROR_STOP=1, as a role that may create the extension.
BEGIN;

DO $move$
DECLARE
    state regclass := to_regclass(format('%I.%I', current_schema(), 'atomflake_state'));
    made_for text;
    signature text;
BEGIN
    IF current_setting('atomflake.layout', true) IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '55000', MESSAGE =
            'atomflake is not loaded at server start: add atomflake to shared_preload_libraries, set atomflake.layout = twitter and atomflake.node, and restart the server before the move';
    END IF;
    IF current_setting('atomflake.layout') <> 'twitter' THEN
        RAISE EXCEPTION USING ERRCODE = '55000', MESSAGE = format(
            'the server mints layout %s (atomflake.layout) and the script layout twitter: set atomflake.layout = twitter and restart the server before the move',
            current_setting('atomflake.layout'));
    END IF;
    IF state IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '42P01', MESSAGE = format(
            'there is no sequence %I.atomflake_state: schema %I holds no state of the script with prefix atomflake',
            current_schema(), current_schema());
    END IF;
    made_for := obj_description(state, 'pg_class');
    IF made_for IS DISTINCT FROM 'atomflake state: timestamp 41 bits, node 10 bits, sequence 12 bits, time|node|sequence, epoch 1288834974657 ms, tick 1 ms, counter 22 bits' THEN
        RAISE EXCEPTION USING ERRCODE = '55000', MESSAGE = format(
            'sequence %s holds the state of another layout: %s', state, made_for);
    END IF;
    -- The end of the tick of the state's last slot: past every ID the script minted.
    PERFORM set_config('atomflake_move.mark',
        coalesce(((pg_sequence_last_value(state) >> 22) + 1) * 1 + 1288834974657, 0)::text, true);
    EXECUTE format('CREATE SCHEMA %I', 'atomflake_retired');
    FOREACH signature IN ARRAY ARRAY['atomflake_advance(bigint, bigint, boolean)', 'atomflake_next_id()', 'atomflake_next_id_at(bigint)', 'atomflake_check(bigint)', 'atomflake_unix_ms(bigint)', 'atomflake_node(bigint)', 'atomflake_sequence(bigint)', 'atomflake_time(bigint)', 'atomflake_first_id_at(timestamptz)', 'atomflake_last_id_at(timestamptz)'] LOOP
        EXECUTE format('ALTER FUNCTION %I.%s SET SCHEMA %I', current_schema(), signature, 'atomflake_retired');
    END LOOP;
    EXECUTE format('ALTER SEQUENCE %s SET SCHEMA %I', state, 'atomflake_retired');
END
$move$;

CREATE EXTENSION atomflake;
SELECT atomflake_raise_mark(current_setting('atomflake_move.mark')::bigint);

DO $columns$
DECLARE
    def record;
BEGIN
    FOR def IN
        SELECT d.adrelid::regclass AS tbl, a.attname AS col
        FROM pg_attrdef d
        JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
        JOIN pg_depend dep ON dep.classid = 'pg_attrdef'::regclass AND dep.objid = d.oid
            AND dep.refclassid = 'pg_proc'::regclass
        WHERE dep.refobjid = format('%I.%I()', 'atomflake_retired', 'atomflake_next_id')::regprocedure
        ORDER BY d.adrelid::regclass::text, a.attname
    LOOP
        PERFORM atomflake_adopt(def.tbl, def.col);
    END LOOP;
END
$columns$;

DO $drop$
DECLARE
    signature text;
BEGIN
    FOREACH signature IN ARRAY ARRAY['atomflake_last_id_at(timestamptz)', 'atomflake_first_id_at(timestamptz)', 'atomflake_time(bigint)', 'atomflake_sequence(bigint)', 'atomflake_node(bigint)', 'atomflake_unix_ms(bigint)', 'atomflake_check(bigint)', 'atomflake_next_id_at(bigint)', 'atomflake_next_id()', 'atomflake_advance(bigint, bigint, boolean)'] LOOP
        EXECUTE format('DROP FUNCTION %I.%s', 'atomflake_retired', signature);
    END LOOP;
    EXECUTE format('DROP SEQUENCE %I.%I', 'atomflake_retired', 'atomflake_state');
    EXECUTE format('DROP SCHEMA %I', 'atomflake_retired');
END
$drop$;

COMMIT;
