-- atomflake VERSION: Snowflake IDs minted inside PostgreSQL.
--
-- Layout: 42-bit timestamp (1 ms ticks since 1420070400000 ms), 10-bit node,
-- 12-bit sequence, time | node | sequence. Node: 1. Prefix: atomflake.
-- IDs fit a bigint until 3619093655552 ms (Unix); past it atomflake_next_id() raises an error.
--
-- Idempotent: apply it again, or with another node, at any time; the state is kept. It
-- creates its objects in the current schema (the first of search_path).
--
--     CREATE TABLE t (id bigint PRIMARY KEY DEFAULT atomflake_next_id(), ...);
--     GRANT USAGE, UPDATE ON SEQUENCE atomflake_state TO <each role that inserts>;
--
-- Why no two calls mint the same ID
--
-- The state is the sequence atomflake_state. Its value is a slot: tick * 2^22 + n, a tick of
-- the layout and a counter n within it. A call reads the clock's tick and the sequence's
-- next slot (pg_sequence_last_value() + 1):
--   * if that slot's tick is at or past the clock's and n < 4096 (the sequence
--     field), it takes a slot with nextval() and returns the ID (tick, node, n) if n is
--     still in the field, or starts again (other calls spent the tick in between);
--   * if the tick is spent (n past the field), it waits, holding nothing, for the clock to
--     pass it, at most 10000 ms;
--   * if the tick is before the clock's, it takes an advisory lock, reads the sequence
--     again and, if it is still before the clock's tick, jumps: setval() to that tick's
--     first slot. Then it starts again.
-- An ID is a one-to-one function of its slot, so IDs repeat only if usable slots do. The
-- only setval() is the jump, made under the lock after a read under the lock, to a later
-- tick than its read saw: the sequence only grows. A call takes a slot past the field only
-- if its read came before the tick was spent and its nextval() after, and then no other
-- in that tick: at most one per session, however calls end (errors, cancels, killed
-- sessions take nothing more). n has room for 4190208 slots past the field, so with no
-- more sessions than that it never carries into the next tick while a jump is under way:
-- every slot handed out before a jump is below its target and every slot after it above.
-- Sessions are max_connections + max_worker_processes + max_wal_senders +
-- autovacuum_max_workers: checked when this script is applied and before every jump.
-- atomflake_next_id_at(t) mints from the same state, so t may be at most 5000 ms ahead of
-- the server's clock: a later atomflake_next_id() is stamped at most that far ahead of its time.
-- The sequence is not transactional (a rolled-back transaction keeps its IDs used), and
-- after a crash it restarts past every value a committed transaction used. A clock that
-- moves back continues the last tick; a spent tick waits for the clock. Do not reset,
-- alter or setval() the sequence by hand.
--
-- One transaction: a refusal below changes nothing, however psql runs the script (with
-- ON_ERROR_STOP=1 psql stops at the refusal; without it, every later statement fails and
-- COMMIT rolls back).
BEGIN;

-- The counter has room for 4190208 values past the sequence field, one per session: the
-- server may run no more sessions at once (checked here and before every jump).
DO $room$
BEGIN
    IF current_setting('max_connections')::int + current_setting('max_worker_processes')::int + current_setting('max_wal_senders')::int + current_setting('autovacuum_max_workers')::int > 4190208 THEN
        RAISE EXCEPTION USING ERRCODE = '53400', MESSAGE = format(
            'this server runs up to %s sessions at once (max_connections %s + max_worker_processes %s + max_wal_senders %s + autovacuum_max_workers %s), more than the 4190208 that atomflake''s state has room for (layout 42/10/12 bits, 1 ms ticks, epoch 1420070400000 ms)',
            current_setting('max_connections')::int + current_setting('max_worker_processes')::int + current_setting('max_wal_senders')::int + current_setting('autovacuum_max_workers')::int, current_setting('max_connections'), current_setting('max_worker_processes'), current_setting('max_wal_senders'), current_setting('autovacuum_max_workers')),
            HINT = 'lower these settings, or use a layout with more sequence bits or fewer timestamp bits';
    END IF;
END
$room$;

CREATE SEQUENCE IF NOT EXISTS atomflake_state AS bigint MINVALUE -1 START 0 CACHE 1 NO CYCLE;

DO $install$
DECLARE
    state text := format('%I.%I', current_schema(), 'atomflake_state');
    advance text := format('%I.%I', current_schema(), 'atomflake_advance');
    made_for text := obj_description(state::regclass, 'pg_class');
BEGIN
    IF made_for IS NOT NULL AND made_for <> 'atomflake state: timestamp 42 bits, node 10 bits, sequence 12 bits, time|node|sequence, epoch 1420070400000 ms, tick 1 ms, counter 22 bits' THEN
        RAISE EXCEPTION 'sequence atomflake_state holds the state of another layout: %', made_for
            USING HINT = 'use another prefix, or drop the sequence if no IDs of that layout are minted any more';
    END IF;
    EXECUTE format('COMMENT ON SEQUENCE %s IS %L', state, 'atomflake state: timestamp 42 bits, node 10 bits, sequence 12 bits, time|node|sequence, epoch 1420070400000 ms, tick 1 ms, counter 22 bits');

    -- The slow path: called with the sequence's next value when it is no ID at now_ms.
    EXECUTE replace($sql$
CREATE OR REPLACE FUNCTION atomflake_advance(next_free bigint, now_ms bigint, may_wait boolean)
RETURNS void LANGUAGE plpgsql VOLATILE AS $body$
DECLARE
    tick bigint;
    waited_ms bigint := 0;
    wait_ms bigint;
BEGIN
    LOOP
        IF now_ms < 1420070400000 THEN
            RAISE EXCEPTION USING ERRCODE = '22008', MESSAGE = format(
                'time %s ms is before the layout''s epoch: the layout allows 1420070400000 ms and later', now_ms);
        END IF;
        tick := (now_ms - 1420070400000);
        IF tick > 2199023255551 THEN
            RAISE EXCEPTION USING ERRCODE = '22008', MESSAGE = format(
                'time %s ms is past the end of atomflake''s ids: ids are minted for times before 3619093655552 ms', now_ms);
        END IF;
        EXIT WHEN (next_free >> 22) < tick;
        -- The state's tick is spent and the clock has not passed it: wait, holding nothing.
        wait_ms := ((next_free >> 22) + 1) * 1 + 1420070400000 - now_ms;
        IF NOT may_wait THEN
            RAISE EXCEPTION USING ERRCODE = '55000', MESSAGE = format(
                'sequence exhausted at %s ms: tick %s is spent, ids are available again at %s ms',
                now_ms, (next_free >> 22), now_ms + wait_ms);
        END IF;
        IF waited_ms + wait_ms > 10000 THEN
            RAISE EXCEPTION USING ERRCODE = '55000', MESSAGE = format(
                'clock is %s ms behind atomflake''s state: a call waits at most 10000 ms for a spent tick',
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
    IF current_setting('max_connections')::int + current_setting('max_worker_processes')::int + current_setting('max_wal_senders')::int + current_setting('autovacuum_max_workers')::int > 4190208 THEN
        RAISE EXCEPTION USING ERRCODE = '53400', MESSAGE = format(
            'this server runs up to %s sessions at once (max_connections %s + max_worker_processes %s + max_wal_senders %s + autovacuum_max_workers %s), more than the 4190208 that atomflake''s state has room for (layout 42/10/12 bits, 1 ms ticks, epoch 1420070400000 ms)',
            current_setting('max_connections')::int + current_setting('max_worker_processes')::int + current_setting('max_wal_senders')::int + current_setting('autovacuum_max_workers')::int, current_setting('max_connections'), current_setting('max_worker_processes'), current_setting('max_wal_senders'), current_setting('autovacuum_max_workers')),
            HINT = 'lower these settings, or use a layout with more sequence bits or fewer timestamp bits';
    END IF;
    BEGIN
        PERFORM pg_advisory_lock((1635020653::bigint << 32) | @state@::regclass::oid::bigint);
        next_free := coalesce(pg_sequence_last_value(@state@) + 1, 0);
        IF (next_free >> 22) < tick THEN
            PERFORM setval(@state@, (tick << 22) - 1);
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
CREATE OR REPLACE FUNCTION atomflake_next_id()
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
        IF now_ms >= 1420070400000 AND (next_free >> 22) >= (now_ms - 1420070400000) AND (next_free & 4194303) < 4096 THEN
            slot := nextval(@state@);
            IF (slot & 4194303) < 4096 THEN
                RETURN (((slot >> 22) << 22) | 4096 | (slot & 4194303));
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
CREATE OR REPLACE FUNCTION atomflake_next_id_at(unix_ms bigint)
RETURNS bigint LANGUAGE plpgsql VOLATILE STRICT AS $body$
DECLARE
    next_free bigint;
    slot bigint;
    now_ms bigint;
BEGIN
    now_ms := floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint;
    IF unix_ms > now_ms + 5000 THEN
        RAISE EXCEPTION USING ERRCODE = '22008', MESSAGE = format(
            'time %s ms is %s ms ahead of the clock: atomflake_next_id_at mints at most 5000 ms ahead',
            unix_ms, unix_ms - now_ms);
    END IF;
    LOOP
        now_ms := unix_ms;
        -- Take a slot only when the next one is an ID at now_ms.
        next_free := coalesce(pg_sequence_last_value(@state@) + 1, 0);
        IF now_ms >= 1420070400000 AND (next_free >> 22) >= (now_ms - 1420070400000) AND (next_free & 4194303) < 4096 THEN
            slot := nextval(@state@);
            IF (slot & 4194303) < 4096 THEN
                RETURN (((slot >> 22) << 22) | 4096 | (slot & 4194303));
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
CREATE OR REPLACE FUNCTION atomflake_check(id bigint)
RETURNS bigint LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $body$
BEGIN
    IF id < 0 OR id > 9223372036854775807 THEN
        RAISE EXCEPTION 'id % is out of range: the layout allows 0..=9223372036854775807', id
            USING ERRCODE = '22003';
    END IF;
    RETURN id;
END
$body$;

CREATE OR REPLACE FUNCTION atomflake_unix_ms(id bigint)
RETURNS bigint LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN (atomflake_check(id) >> 22) * 1 + 1420070400000;

CREATE OR REPLACE FUNCTION atomflake_node(id bigint)
RETURNS bigint LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN (atomflake_check(id) >> 12) & 1023;

CREATE OR REPLACE FUNCTION atomflake_sequence(id bigint)
RETURNS bigint LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN atomflake_check(id) & 4095;

CREATE OR REPLACE FUNCTION atomflake_time(id bigint)
RETURNS timestamptz LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN to_timestamp(atomflake_unix_ms(id) / 1000) + (atomflake_unix_ms(id) % 1000) * interval '1 millisecond';

-- Paging by time with the primary key: WHERE id BETWEEN atomflake_first_id_at(t1) AND
-- atomflake_last_id_at(t2) holds every ID whose tick overlaps [t1, t2].
CREATE OR REPLACE FUNCTION atomflake_first_id_at(at timestamptz)
RETURNS bigint LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $body$
DECLARE
    ms bigint := floor(extract(epoch FROM at) * 1000)::bigint;
BEGIN
    IF ms < 1420070400000 OR ms >= 3619093655552 THEN
        RAISE EXCEPTION 'time % ms is out of range: the layout''s bigint ids cover 1420070400000..3619093655552 ms', ms
            USING ERRCODE = '22008';
    END IF;
    RETURN ((ms - 1420070400000) << 22);
END
$body$;

CREATE OR REPLACE FUNCTION atomflake_last_id_at(at timestamptz)
RETURNS bigint LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN atomflake_first_id_at(at) | 4194303;

COMMIT;
