DECLARE
{variables}    att record;
    fk record;
    seq text;
    kind text;
    minted bigint;
    first_id bigint;
    newest bigint;
    saved_row_security text;
BEGIN
{checks}    SELECT c.relkind INTO kind FROM pg_class c WHERE c.oid = tbl;
    IF kind NOT IN ('r', 'p') THEN
        RAISE EXCEPTION USING ERRCODE = '42809', MESSAGE = format(
            'cannot adopt column %s: %s is %s, not a table: adopt the column of the table it reads',
            what, tbl, CASE kind WHEN 'v' THEN 'a view' WHEN 'm' THEN 'a materialized view'
                WHEN 'f' THEN 'a foreign table' WHEN 'S' THEN 'a sequence' WHEN 'c' THEN 'a composite type'
                WHEN 'i' THEN 'an index' WHEN 'I' THEN 'a partitioned index' WHEN 't' THEN 'a TOAST table'
                ELSE format('a relation of kind %s', kind) END);
    END IF;
    SELECT a.attidentity, d.oid AS default_oid INTO att
    FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
    WHERE a.attrelid = tbl AND a.attname = col AND a.attnum > 0 AND NOT a.attisdropped;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = '42703', MESSAGE = format(
            'cannot adopt column %s: table %s has no column %I', what, tbl, col);
    END IF;
    IF att.attidentity = '' AND pg_get_serial_sequence(tbl::text, col) IS NULL
        AND EXISTS (SELECT FROM pg_depend
            WHERE classid = 'pg_attrdef'::regclass AND objid = att.default_oid
                AND refclassid = 'pg_proc'::regclass AND refobjid = mint::regprocedure) THEN
        RAISE NOTICE 'column % already takes its ids from %', what, mint;
        RETURN;
    END IF;
    -- Under read committed every statement below sees every row committed before the
    -- lock; an older snapshot could miss some.
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION USING ERRCODE = '25001', MESSAGE = format(
            'cannot adopt column %s in a %s transaction: run it under read committed, the default',
            what, current_setting('transaction_isolation'));
    END IF;
    -- From here until commit no row goes in or out.
    EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', tbl);
    SELECT a.attnum, a.atttypid::regtype AS type, a.attidentity INTO att
    FROM pg_attribute a
    WHERE a.attrelid = tbl AND a.attname = col AND a.attnum > 0 AND NOT a.attisdropped;
    IF att.type <> 'bigint'::regtype THEN
        RAISE EXCEPTION USING ERRCODE = '42804', MESSAGE = format(
            'cannot adopt column %s: it is %s and atomflake ids are bigint; change it first with ALTER TABLE %s ALTER COLUMN %I TYPE bigint (this rewrites the table), then adopt it',
            what, att.type, tbl, col);
    END IF;
    FOR fk IN
        SELECT c.conname, c.conrelid::regclass AS child, a.attname, a.atttypid::regtype AS type
        FROM pg_constraint c
        CROSS JOIN LATERAL unnest(c.conkey, c.confkey) AS k(child_column, parent_column)
        JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.child_column
        WHERE c.contype = 'f' AND c.confrelid = tbl AND k.parent_column = att.attnum
            AND a.atttypid <> 'bigint'::regtype
        ORDER BY c.conrelid::regclass::text, a.attname
    LOOP
        RAISE EXCEPTION USING ERRCODE = '42804', MESSAGE = format(
            'cannot adopt column %s: column %s.%I references it (foreign key %I) and is %s, which atomflake ids do not fit; change it first with ALTER TABLE %s ALTER COLUMN %I TYPE bigint, then adopt %s',
            what, fk.child, fk.attname, fk.conname, fk.type, fk.child, fk.attname, what);
    END LOOP;
    -- Every id minted from here on is at least the first id of this one's tick, on any node.
    minted := {mint_call};
    first_id := {first_of_tick};
    saved_row_security := current_setting('row_security');
    PERFORM set_config('row_security', 'off', true);
    BEGIN
        EXECUTE format('SELECT max(%I) FROM %s', col, tbl) INTO newest;
    EXCEPTION WHEN insufficient_privilege THEN
        IF NOT (SELECT c.relrowsecurity FROM pg_class c WHERE c.oid = tbl) THEN
            RAISE;
        END IF;
        RAISE EXCEPTION USING ERRCODE = '42501', MESSAGE = format(
            'cannot adopt column %s: row-level security hides rows of %s from role %s, so their ids cannot be checked; adopt it as a role that sees every row (one with BYPASSRLS, or the owner once the table has NO FORCE ROW LEVEL SECURITY)',
            what, tbl, current_user);
    END;
    PERFORM set_config('row_security', saved_row_security, true);
    IF newest >= first_id THEN
        RAISE EXCEPTION USING ERRCODE = '55000', MESSAGE = format(
            'cannot adopt column %s: it holds %s, which decodes to %s, at or above %s (%s), the smallest id atomflake mints from now on; adopt it once atomflake''s ids are past its values (after %s), or use a layout whose ids are above them',
            what, newest, {newest_time}, first_id, {first_time}, {newest_time});
    END IF;
    IF att.attidentity <> '' THEN
        EXECUTE format('ALTER TABLE %s ALTER COLUMN %I DROP IDENTITY', tbl, col);
    ELSE
        seq := pg_get_serial_sequence(tbl::text, col);
        IF seq IS NOT NULL THEN
            EXECUTE format('ALTER SEQUENCE %s OWNED BY NONE', seq);
        END IF;
    END IF;
    EXECUTE format('ALTER TABLE %s ALTER COLUMN %I SET DEFAULT %s', tbl, col, mint);
    RAISE NOTICE 'column % now takes its ids from %', what, mint;
END
