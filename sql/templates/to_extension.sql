-- Moves this database from atomflake's SQL script (prefix {p}, in the current schema) to the
-- extension atomflake, in one transaction: nothing changes when a step is refused. Run it
-- with psql -v ON_ERROR_STOP=1, as a role that may create the extension.
BEGIN;

DO $move$
DECLARE
    state regclass := to_regclass(format('%I.%I', current_schema(), '{p}_state'));
    made_for text;
    signature text;
BEGIN
    IF current_setting('atomflake.layout', true) IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '55000', MESSAGE =
            'atomflake is not loaded at server start: add atomflake to shared_preload_libraries, set atomflake.layout = {preset} and atomflake.node, and restart the server before the move';
    END IF;
    IF current_setting('atomflake.layout') <> '{preset}' THEN
        RAISE EXCEPTION USING ERRCODE = '55000', MESSAGE = format(
            'the server mints layout %s (atomflake.layout) and the script layout {preset}: set atomflake.layout = {preset} and restart the server before the move',
            current_setting('atomflake.layout'));
    END IF;
    IF state IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '42P01', MESSAGE = format(
            'there is no sequence %I.{p}_state: schema %I holds no state of the script with prefix {p}',
            current_schema(), current_schema());
    END IF;
    made_for := obj_description(state, 'pg_class');
    IF made_for IS DISTINCT FROM '{fingerprint}' THEN
        RAISE EXCEPTION USING ERRCODE = '55000', MESSAGE = format(
            'sequence %s holds the state of another layout: %s', state, made_for);
    END IF;
    -- The end of the tick of the state's last slot: past every ID the script minted.
    PERFORM set_config('atomflake_move.mark',
        coalesce(((pg_sequence_last_value(state) >> {k}) + 1) * {tick_ms} + {epoch}, 0)::text, true);
    EXECUTE format('CREATE SCHEMA %I', '{p}_retired');
    FOREACH signature IN ARRAY ARRAY[{functions}] LOOP
        EXECUTE format('ALTER FUNCTION %I.%s SET SCHEMA %I', current_schema(), signature, '{p}_retired');
    END LOOP;
    EXECUTE format('ALTER SEQUENCE %s SET SCHEMA %I', state, '{p}_retired');
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
        WHERE dep.refobjid = format('%I.%I()', '{p}_retired', '{p}_next_id')::regprocedure
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
    FOREACH signature IN ARRAY ARRAY[{dropped}] LOOP
        EXECUTE format('DROP FUNCTION %I.%s', '{p}_retired', signature);
    END LOOP;
    EXECUTE format('DROP SEQUENCE %I.%I', '{p}_retired', '{p}_state');
    EXECUTE format('DROP SCHEMA %I', '{p}_retired');
END
$drop$;

COMMIT;
