-- atomflake VERSION: Snowflake IDs minted inside PostgreSQL.
--
-- Layout: 38-bit timestamp (10 ms ticks since 1735689600000 ms), 7-bit node,
-- 8-bit sequence, time | node | sequence. Node: 1. Prefix: idz.
-- IDs fit a bigint until 4484468669440 ms (Unix); past it idz_next_id() raises an error.
--
-- Idempotent: apply it again, or with another node, at any time; the state is kept. It
-- creates its objects in the current schema (the first of search_path).
--
--     CREATE TABLE t (id bigint PRIMARY KEY DEFAULT idz_next_id(), ...);
--     GRANT USAGE, UPDATE ON SEQUENCE idz_state TO <each role that inserts>;
--
-- Why no two calls mint the same ID
--
-- The state is the sequence idz_state. Its value is a slot: tick * 2^25 + n, a tick of
-- the layout and a counter n within it. A call reads the clock's tick and the sequence's
-- next slot (pg_sequence_last_value() + 1):
--   * if that slot's tick is at or past the clock's and n < 256 (the sequence
--     field), it takes a slot with nextval() and returns the ID (tick, node, n) if n is
--     still in the field, or starts again (other calls spent the tick in between);
--   * if the tick is spent (n past the field), it waits, holding nothing, for the clock to
--     pass it, at most 2500 ms;
--   * if the tick is before the clock's, it takes an advisory lock, reads the sequence
--     again and, if it is still before the clock's tick, jumps: setval() to that tick's
--     first slot. Then it starts again.
-- An ID is a one-to-one function of its slot, so IDs repeat only if usable slots do. The
-- only setval() is the jump, made under the lock after a read under the lock, to a later
-- tick than its read saw: the sequence only grows. A call takes a slot past the field only
-- if its read came before the tick was spent and its nextval() after, and then no other
-- in that tick: at most one per session, however calls end (errors, cancels, killed
-- sessions take nothing more). n has room for 33554176 slots past the field, so with no
-- more sessions than that it never carries into the next tick while a jump is under way:
-- every slot handed out before a jump is below its target and every slot after it above.
-- Sessions are max_connections + max_worker_processes + max_wal_senders +
-- autovacuum_max_workers: checked when this script is applied and before every jump.
-- idz_next_id_at(t) mints from the same state, so t may be at most 1250 ms ahead of
-- the server's clock: a later idz_next_id() is stamped at most that far ahead of its time.
-- The sequence is not transactional (a rolled-back transaction keeps its IDs used), and
-- after a crash it restarts past every value a committed transaction used. A clock that
-- moves back continues the last tick; a spent tick waits for the clock. Do not reset,
-- alter or setval() the sequence by hand.
--
-- One transaction: a refusal below changes nothing, however psql runs the script (with
-- ON_ERROR_STOP=1 psql stops at the refusal; without it, every later statement fails and
-- COMMIT rolls back).
BEGIN;

-- The counter has room for 33554176 values past the sequence field, one per session: the
-- server may run no more sessions at once (checked here and before every jump).
DO $room$
BEGIN
    IF current_setting('max_connections')::int + current_setting('max_worker_processes')::int + current_setting('max_wal_senders')::int + current_setting('autovacuum_max_workers')::int > 33554176 THEN
        RAISE EXCEPTION USING ERRCODE = '53400', MESSAGE = format(
            'this server runs up to %s sessions at once (max_connections %s + max_worker_processes %s + max_wal_senders %s + autovacuum_max_workers %s), more than the 33554176 that idz''s state has room for (layout 38/7/8 bits, 10 ms ticks, epoch 1735689600000 ms)',
            current_setting('max_connections')::int + current_setting('max_worker_processes')::int + current_setting('max_wal_senders')::int + current_setting('autovacuum_max_workers')::int, current_setting('max_connections'), current_setting('max_worker_processes'), current_setting('max_wal_senders'), current_setting('autovacuum_max_workers')),
            HINT = 'lower these settings, or use a layout with more sequence bits or fewer timestamp bits';
    END IF;
END
$room$;

CREATE SEQUENCE IF NOT EXISTS idz_state AS bigint MINVALUE -1 START 0 CACHE 1 NO CYCLE;

DO $install$
DECLARE
    state text := format('%I.%I', current_schema(), 'idz_state');
    advance text := format('%I.%I', current_schema(), 'idz_advance');
    made_for text := obj_description(state::regclass, 'pg_class');
BEGIN
    IF made_for IS NOT NULL AND made_for <> 'atomflake state: timestamp 38 bits, node 7 bits, sequence 8 bits, time|node|sequence, epoch 1735689600000 ms, tick 10 ms, counter 25 bits' THEN
        RAISE EXCEPTION 'sequence idz_state holds the state of another layout: %', made_for
            USING HINT = 'use another prefix, or drop the sequence if no IDs of that layout are minted any more';
    END IF;
    EXECUTE format('COMMENT ON SEQUENCE %s IS %L', state, 'atomflake state: timestamp 38 bits, node 7 bits, sequence 8 bits, time|node|sequence, epoch 1735689600000 ms, tick 10 ms, counter 25 bits');

    -- The slow path: called with the sequence's next value when it is no ID at now_ms.
    EXECUTE replace($sql$
CREATE OR REPLACE FUNCTION idz_advance(next_free bigint, now_ms bigint, may_wait boolean)
RETURNS void LANGUAGE plpgsql VOLATILE AS $body$
DECLARE
    tick bigint;
    waited_ms bigint := 0;
    wait_ms bigint;
BEGIN
    LOOP
        IF now_ms < 1735689600000 THEN
            RAISE EXCEPTION USING ERRCODE = '22008', MESSAGE = format(
                'time %s ms is before the layout''s epoch: the layout allows 1735689600000 ms and later', now_ms);
        END IF;
        tick := ((now_ms - 1735689600000) / 10);
        IF tick > 274877906943 THEN
            RAISE EXCEPTION USING ERRCODE = '22008', MESSAGE = format(
                'time %s ms is past the end of idz''s ids: ids are minted for times before 4484468669440 ms', now_ms);
        END IF;
        EXIT WHEN (next_free >> 25) < tick;
        -- The state's tick is spent and the clock has not passed it: wait, holding nothing.
        wait_ms := ((next_free >> 25) + 1) * 10 + 1735689600000 - now_ms;
        IF NOT may_wait THEN
            RAISE EXCEPTION USING ERRCODE = '55000', MESSAGE = format(
                'sequence exhausted at %s ms: tick %s is spent, ids are available again at %s ms',
                now_ms, (next_free >> 25), now_ms + wait_ms);
        END IF;
        IF waited_ms + wait_ms > 2500 THEN
            RAISE EXCEPTION USING ERRCODE = '55000', MESSAGE = format(
                'clock is %s ms behind idz''s state: a call waits at most 2500 ms for a spent tick',
                wait_ms);
        END IF;
        PERFORM pg_sleep(wait_ms / 1000.0);
        waited_ms := waited_ms + wait_ms;
        now_ms := floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint;
    END LOOP;
    -- The state was in a tick before the clock's: jump, if the server runs no more
    -- sessions than the counter has room for. Under the lock, to the clock's tick unless
    -- another call has moved the state there or past since. The lock is released on every
    -- way out, a cancel included.
    IF current_setting('max_connections')::int + current_setting('max_worker_processes')::int + current_setting('max_wal_senders')::int + current_setting('autovacuum_max_workers')::int > 33554176 THEN
        RAISE EXCEPTION USING ERRCODE = '53400', MESSAGE = format(
            'this server runs up to %s sessions at once (max_connections %s + max_worker_processes %s + max_wal_senders %s + autovacuum_max_workers %s), more than the 33554176 that idz''s state has room for (layout 38/7/8 bits, 10 ms ticks, epoch 1735689600000 ms)',
            current_setting('max_connections')::int + current_setting('max_worker_processes')::int + current_setting('max_wal_senders')::int + current_setting('autovacuum_max_workers')::int, current_setting('max_connections'), current_setting('max_worker_processes'), current_setting('max_wal_senders'), current_setting('autovacuum_max_workers')),
            HINT = 'lower these settings, or use a layout with more sequence bits or fewer timestamp bits';
    END IF;
    BEGIN
        PERFORM pg_advisory_lock((1635020653::bigint << 32) | @state@::regclass::oid::bigint);
        next_free := coalesce(pg_sequence_last_value(@state@) + 1, 0);
        IF (next_free >> 25) < tick THEN
            PERFORM setval(@state@, (tick << 25) - 1);
        END IF;
        PERFORM pg_advisory_unlock((1635020653::bigint << 32) | @state@::regclass::oid::bigint);
    EXCEPTION WHEN OTHERS OR query_canceled THEN
        PERFORM pg_advisory_unlock((1635020653::bigint << 32) | @state@::regclass::oid::bigint);
        RAISE;
    END;
END
$body$
$sql$, '@state@', quote_literal(state));

    -- The mint, reading the clock.
    EXECUTE replace(replace($sql$
CREATE OR REPLACE FUNCTION idz_next_id()
RETURNS bigint LANGUAGE plpgsql VOLATILE AS $body$
DECLARE
    next_free bigint;
    slot bigint;
    now_ms bigint;
BEGIN
    LOOP
        now_ms := floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint;
        -- Take a slot only when the next one is an ID at now_ms.
        next_free := coalesce(pg_sequence_last_value(@state@) + 1, 0);
        IF now_ms >= 1735689600000 AND (next_free >> 25) >= ((now_ms - 1735689600000) / 10) AND (next_free & 33554431) < 256 THEN
            slot := nextval(@state@);
            IF (slot & 33554431) < 256 THEN
                RETURN (((slot >> 25) << 15) | 256 | (slot & 33554431));
            END IF;
            -- Other calls spent the tick in between: the slot is dropped.
        ELSE
            -- Stale, spent, or a time outside the span: wait and jump, or raise.
            PERFORM @advance@(next_free, now_ms, true);
        END IF;
    END LOOP;
END
$body$
$sql$, '@state@', quote_literal(state)), '@advance@', advance);

    -- The mint at a given time: never waits.
    EXECUTE replace(replace($sql$
CREATE OR REPLACE FUNCTION idz_next_id_at(unix_ms bigint)
RETURNS bigint LANGUAGE plpgsql VOLATILE STRICT AS $body$
DECLARE
    next_free bigint;
    slot bigint;
    now_ms bigint;
BEGIN
    now_ms := floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint;
    IF unix_ms > now_ms + 1250 THEN
        RAISE EXCEPTION USING ERRCODE = '22008', MESSAGE = format(
            'time %s ms is %s ms ahead of the clock: idz_next_id_at mints at most 1250 ms ahead',
            unix_ms, unix_ms - now_ms);
    END IF;
    LOOP
        now_ms := unix_ms;
        -- Take a slot only when the next one is an ID at now_ms.
        next_free := coalesce(pg_sequence_last_value(@state@) + 1, 0);
        IF now_ms >= 1735689600000 AND (next_free >> 25) >= ((now_ms - 1735689600000) / 10) AND (next_free & 33554431) < 256 THEN
            slot := nextval(@state@);
            IF (slot & 33554431) < 256 THEN
                RETURN (((slot >> 25) << 15) | 256 | (slot & 33554431));
            END IF;
            -- Other calls spent the tick in between: the slot is dropped.
        ELSE
            -- Stale, spent, or a time outside the span: wait and jump, or raise.
            PERFORM @advance@(next_free, now_ms, false);
        END IF;
    END LOOP;
END
$body$
$sql$, '@state@', quote_literal(state)), '@advance@', advance);
END
$install$;

-- Decoding. Negative values and bits above the layout are errors, never masked.
CREATE OR REPLACE FUNCTION idz_check(id bigint)
RETURNS bigint LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $body$
BEGIN
    IF id < 0 OR id > 9007199254740991 THEN
        RAISE EXCEPTION 'id % is out of range: the layout allows 0..=9007199254740991', id
            USING ERRCODE = '22003';
    END IF;
    RETURN id;
END
$body$;

CREATE OR REPLACE FUNCTION idz_unix_ms(id bigint)
RETURNS bigint LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN (idz_check(id) >> 15) * 10 + 1735689600000;

CREATE OR REPLACE FUNCTION idz_node(id bigint)
RETURNS bigint LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN (idz_check(id) >> 8) & 127;

CREATE OR REPLACE FUNCTION idz_sequence(id bigint)
RETURNS bigint LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN idz_check(id) & 255;

CREATE OR REPLACE FUNCTION idz_time(id bigint)
RETURNS timestamptz LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN to_timestamp(idz_unix_ms(id) / 1000) + (idz_unix_ms(id) % 1000) * interval '1 millisecond';

-- Paging by time with the primary key: WHERE id BETWEEN idz_first_id_at(t1) AND
-- idz_last_id_at(t2) holds every ID whose tick overlaps [t1, t2].
CREATE OR REPLACE FUNCTION idz_first_id_at(at timestamptz)
RETURNS bigint LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $body$
DECLARE
    ms bigint := floor(extract(epoch FROM at) * 1000)::bigint;
BEGIN
    IF ms < 1735689600000 OR ms >= 4484468669440 THEN
        RAISE EXCEPTION 'time % ms is out of range: the layout''s bigint ids cover 1735689600000..4484468669440 ms', ms
            USING ERRCODE = '22008';
    END IF;
    RETURN (((ms - 1735689600000) / 10) << 15);
END
$body$;

CREATE OR REPLACE FUNCTION idz_last_id_at(at timestamptz)
RETURNS bigint LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN idz_first_id_at(at) | 32767;

-- Adopt public.orders.id: new rows take idz_next_id(). In one statement, under an ACCESS
-- EXCLUSIVE lock on the table: the column must be bigint (and every foreign key to it),
-- and every value in it below the first id of the tick idz_next_id() mints at; then its
-- default becomes idz_next_id() and its identity (with its sequence) or its sequence's
-- ownership goes. Nothing is done for a column whose default already calls it. The rows
-- are read with row security off; only a table is taken; lock_timeout bounds the lock.
DO $adopt$
DECLARE
    what text := 'public.orders.id';
    tbl regclass := to_regclass('public.orders');
    col name := 'id';
    mint text := format('%I.%I()', current_schema(), 'idz_next_id');
    att record;
    fk record;
    seq text;
    kind text;
    minted bigint;
    first_id bigint;
    newest bigint;
    saved_row_security text;
BEGIN
    IF tbl IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '42P01', MESSAGE = format(
            'cannot adopt column %s: there is no table public.orders', what);
    END IF;
    SELECT c.relkind INTO kind FROM pg_class c WHERE c.oid = tbl;
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
    minted := idz_next_id();
    first_id := ((minted >> 15) << 15);
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
            what, newest, (SELECT CASE WHEN ms < 9000000000000000
            THEN to_char(to_timestamp(ms / 1000.0) AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS') || ' UTC'
            ELSE ms || ' ms after 1970' END
        FROM (SELECT (newest >> 15)::numeric * 10 + 1735689600000 AS ms) AS decoded), first_id, (SELECT CASE WHEN ms < 9000000000000000
            THEN to_char(to_timestamp(ms / 1000.0) AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS') || ' UTC'
            ELSE ms || ' ms after 1970' END
        FROM (SELECT (first_id >> 15)::numeric * 10 + 1735689600000 AS ms) AS decoded), (SELECT CASE WHEN ms < 9000000000000000
            THEN to_char(to_timestamp(ms / 1000.0) AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS') || ' UTC'
            ELSE ms || ' ms after 1970' END
        FROM (SELECT (newest >> 15)::numeric * 10 + 1735689600000 AS ms) AS decoded));
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
$adopt$;

-- Adopt t.c: new rows take idz_next_id(). In one statement, under an ACCESS
-- EXCLUSIVE lock on the table: the column must be bigint (and every foreign key to it),
-- and every value in it below the first id of the tick idz_next_id() mints at; then its
-- default becomes idz_next_id() and its identity (with its sequence) or its sequence's
-- ownership goes. Nothing is done for a column whose default already calls it. The rows
-- are read with row security off; only a table is taken; lock_timeout bounds the lock.
DO $adopt$
DECLARE
    what text := 't.c';
    tbl regclass := to_regclass('t');
    col name := 'c';
    mint text := format('%I.%I()', current_schema(), 'idz_next_id');
    att record;
    fk record;
    seq text;
    kind text;
    minted bigint;
    first_id bigint;
    newest bigint;
    saved_row_security text;
BEGIN
    IF tbl IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '42P01', MESSAGE = format(
            'cannot adopt column %s: there is no table t', what);
    END IF;
    SELECT c.relkind INTO kind FROM pg_class c WHERE c.oid = tbl;
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
    minted := idz_next_id();
    first_id := ((minted >> 15) << 15);
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
            what, newest, (SELECT CASE WHEN ms < 9000000000000000
            THEN to_char(to_timestamp(ms / 1000.0) AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS') || ' UTC'
            ELSE ms || ' ms after 1970' END
        FROM (SELECT (newest >> 15)::numeric * 10 + 1735689600000 AS ms) AS decoded), first_id, (SELECT CASE WHEN ms < 9000000000000000
            THEN to_char(to_timestamp(ms / 1000.0) AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS') || ' UTC'
            ELSE ms || ' ms after 1970' END
        FROM (SELECT (first_id >> 15)::numeric * 10 + 1735689600000 AS ms) AS decoded), (SELECT CASE WHEN ms < 9000000000000000
            THEN to_char(to_timestamp(ms / 1000.0) AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS') || ' UTC'
            ELSE ms || ' ms after 1970' END
        FROM (SELECT (newest >> 15)::numeric * 10 + 1735689600000 AS ms) AS decoded));
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
$adopt$;

COMMIT;
