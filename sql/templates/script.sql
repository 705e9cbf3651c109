-- atomflake {version}: Snowflake IDs minted inside PostgreSQL.
--
-- Layout: {ts_bits}-bit timestamp ({tick_ms} ms ticks since {epoch} ms), {node_bits}-bit node,
-- {seq_bits}-bit sequence, {order}. Node: {node}. Prefix: {p}.
-- IDs fit a bigint until {end_ms} ms (Unix); past it {p}_next_id() raises an error.
--
-- Idempotent: apply it again, or with another node, at any time; the state is kept. It
-- creates its objects in the current schema (the first of search_path).
--
--     CREATE TABLE t (id bigint PRIMARY KEY DEFAULT {p}_next_id(), ...);
--     GRANT USAGE, UPDATE ON SEQUENCE {p}_state TO <each role that inserts>;
--
-- Why no two calls mint the same ID
--
-- The state is the sequence {p}_state. Its value is a slot: tick * 2^{k} + n, a tick of
-- the layout and a counter n within it. A call reads the clock's tick and the sequence's
-- next slot (pg_sequence_last_value() + 1):
--   * if that slot's tick is at or past the clock's and n < {per_tick} (the sequence
--     field), it takes a slot with nextval() and returns the ID (tick, node, n) if n is
--     still in the field, or starts again (other calls spent the tick in between);
--   * if the tick is spent (n past the field), it waits, holding nothing, for the clock to
--     pass it, at most {max_wait_ms} ms;
--   * if the tick is before the clock's, it takes an advisory lock, reads the sequence
--     again and, if it is still before the clock's tick, jumps: setval() to that tick's
--     first slot. Then it starts again.
-- An ID is a one-to-one function of its slot, so IDs repeat only if usable slots do. The
-- only setval() is the jump, made under the lock after a read under the lock, to a later
-- tick than its read saw: the sequence only grows. A call takes a slot past the field only
-- if its read came before the tick was spent and its nextval() after, and then no other
-- in that tick: at most one per session, however calls end (errors, cancels, killed
-- sessions take nothing more). n has room for {headroom} slots past the field, so with no
-- more sessions than that it never carries into the next tick while a jump is under way:
-- every slot handed out before a jump is below its target and every slot after it above.
-- Sessions are max_connections + max_worker_processes + max_wal_senders +
-- autovacuum_max_workers: checked when this script is applied and before every jump.
-- {p}_next_id_at(t) mints from the same state, so t may be at most {max_ahead_ms} ms ahead of
-- the server's clock: a later {p}_next_id() is stamped at most that far ahead of its time.
-- The sequence is not transactional (a rolled-back transaction keeps its IDs used), and
-- after a crash it restarts past every value a committed transaction used. A clock that
-- moves back continues the last tick; a spent tick waits for the clock. Do not reset,
-- alter or setval() the sequence by hand.
--
-- One transaction: a refusal below changes nothing, however psql runs the script (with
-- ON_ERROR_STOP=1 psql stops at the refusal; without it, every later statement fails and
-- COMMIT rolls back).
BEGIN;

-- The counter has room for {headroom} values past the sequence field, one per session: the
-- server may run no more sessions at once (checked here and before every jump).
DO $room$
BEGIN
    {room_check}
END
$room$;

CREATE SEQUENCE IF NOT EXISTS {p}_state AS bigint MINVALUE -1 START 0 CACHE 1 NO CYCLE;

DO $install$
DECLARE
    state text := format('%I.%I', current_schema(), '{p}_state');
    advance text := format('%I.%I', current_schema(), '{p}_advance');
    made_for text := obj_description(state::regclass, 'pg_class');
BEGIN
    IF made_for IS NOT NULL AND made_for <> '{fingerprint}' THEN
        RAISE EXCEPTION 'sequence {p}_state holds the state of another layout: %', made_for
            USING HINT = 'use another prefix, or drop the sequence if no IDs of that layout are minted any more';
    END IF;
    EXECUTE format('COMMENT ON SEQUENCE %s IS %L', state, '{fingerprint}');

    -- The slow path: called with the sequence's next value when it is no ID at now_ms.
    EXECUTE replace($sql$
CREATE OR REPLACE FUNCTION {p}_advance(next_free bigint, now_ms bigint, may_wait boolean)
RETURNS void LANGUAGE plpgsql VOLATILE AS $body$
DECLARE
    tick bigint;
    waited_ms bigint := 0;
    wait_ms bigint;
BEGIN
    LOOP
        IF now_ms < {epoch} THEN
            RAISE EXCEPTION USING ERRCODE = '22008', MESSAGE = format(
                'time %s ms is before the layout''s epoch: the layout allows {epoch} ms and later', now_ms);
        END IF;
        tick := {now_tick};
        IF tick > {last_tick} THEN
            RAISE EXCEPTION USING ERRCODE = '22008', MESSAGE = format(
                'time %s ms is past the end of {p}''s ids: ids are minted for times before {end_ms} ms', now_ms);
        END IF;
        EXIT WHEN {next_tick} < tick;
        -- The state's tick is spent and the clock has not passed it: wait, holding nothing.
        wait_ms := ({next_tick} + 1) * {tick_ms} + {epoch} - now_ms;
        IF NOT may_wait THEN
            RAISE EXCEPTION USING ERRCODE = '55000', MESSAGE = format(
                'sequence exhausted at %s ms: tick %s is spent, ids are available again at %s ms',
                now_ms, {next_tick}, now_ms + wait_ms);
        END IF;
        IF waited_ms + wait_ms > {max_wait_ms} THEN
            RAISE EXCEPTION USING ERRCODE = '55000', MESSAGE = format(
                'clock is %s ms behind {p}''s state: a call waits at most {max_wait_ms} ms for a spent tick',
                wait_ms);
        END IF;
        PERFORM pg_sleep(wait_ms / 1000.0);
        waited_ms := waited_ms + wait_ms;
        now_ms := {clock};
    END LOOP;
    -- The state was in a tick before the clock's: jump, if the server runs no more
    -- sessions than the counter has room for. Under the lock, to the clock's tick unless
    -- another call has moved the state there or past since. The lock is released on every
    -- way out, a cancel included.
    {room_check}
    BEGIN
        PERFORM pg_advisory_lock(({lock_class}::bigint << 32) | @state@::regclass::oid::bigint);
        next_free := coalesce(pg_sequence_last_value(@state@) + 1, 0);
        IF {next_tick} < tick THEN
            PERFORM setval(@state@, (tick << {k}) - 1);
        END IF;
        PERFORM pg_advisory_unlock(({lock_class}::bigint << 32) | @state@::regclass::oid::bigint);
    EXCEPTION WHEN OTHERS OR query_canceled THEN
        PERFORM pg_advisory_unlock(({lock_class}::bigint << 32) | @state@::regclass::oid::bigint);
        RAISE;
    END;
END
$body$
$sql$, '@state@', quote_literal(state));

    -- The mint, reading the clock.
    EXECUTE replace(replace($sql$
CREATE OR REPLACE FUNCTION {p}_next_id()
RETURNS bigint LANGUAGE plpgsql VOLATILE AS $body$
{mint_now}
$body$
$sql$, '@state@', quote_literal(state)), '@advance@', advance);

    -- The mint at a given time: never waits.
    EXECUTE replace(replace($sql$
CREATE OR REPLACE FUNCTION {p}_next_id_at(unix_ms bigint)
RETURNS bigint LANGUAGE plpgsql VOLATILE STRICT AS $body$
{mint_at}
$body$
$sql$, '@state@', quote_literal(state)), '@advance@', advance);
END
$install$;

-- Decoding. Negative values and bits above the layout are errors, never masked.
CREATE OR REPLACE FUNCTION {p}_check(id bigint)
RETURNS bigint LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $body$
BEGIN
    IF id < 0 OR id > {max_id} THEN
        RAISE EXCEPTION 'id % is out of range: the layout allows 0..={max_id}', id
            USING ERRCODE = '22003';
    END IF;
    RETURN id;
END
$body$;

CREATE OR REPLACE FUNCTION {p}_unix_ms(id bigint)
RETURNS bigint LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN {unix_ms_of_id};

CREATE OR REPLACE FUNCTION {p}_node(id bigint)
RETURNS bigint LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN {node_of_id};

CREATE OR REPLACE FUNCTION {p}_sequence(id bigint)
RETURNS bigint LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN {sequence_of_id};

CREATE OR REPLACE FUNCTION {p}_time(id bigint)
RETURNS timestamptz LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN to_timestamp({p}_unix_ms(id) / 1000) + ({p}_unix_ms(id) % 1000) * interval '1 millisecond';

-- Paging by time with the primary key: WHERE id BETWEEN {p}_first_id_at(t1) AND
-- {p}_last_id_at(t2) holds every ID whose tick overlaps [t1, t2].
CREATE OR REPLACE FUNCTION {p}_first_id_at(at timestamptz)
RETURNS bigint LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $body$
DECLARE
    ms bigint := floor(extract(epoch FROM at) * 1000)::bigint;
BEGIN
    IF ms < {epoch} OR ms >= {i64_end_ms} THEN
        RAISE EXCEPTION 'time % ms is out of range: the layout''s bigint ids cover {epoch}..{i64_end_ms} ms', ms
            USING ERRCODE = '22008';
    END IF;
    RETURN {first_of_ms};
END
$body$;

CREATE OR REPLACE FUNCTION {p}_last_id_at(at timestamptz)
RETURNS bigint LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN {p}_first_id_at(at) | {below_ts};

-- IDs as UUIDs of version 7 (RFC 9562) and back, exactly: the tick's start as the UUID's
-- time, then version 7, the layout's fingerprint ({uuid_fingerprint}) and the ID's top 2 bits, the
-- variant and the ID's low 62 bits. The UUIDs sort as the IDs do.
CREATE OR REPLACE FUNCTION {p}_to_uuid(id bigint)
RETURNS uuid LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN (lpad(to_hex({p}_unix_ms(id)), 12, '0') || to_hex({uuid_version_and_fingerprint} | (id >> 62))
    || to_hex(32768 | ((id >> 48) & 16383)) || lpad(to_hex(id & 281474976710655), 12, '0'))::uuid;

CREATE OR REPLACE FUNCTION {p}_from_uuid(uuid uuid)
RETURNS bigint LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $body$
DECLARE
    hex text := replace(uuid::text, '-', '');
    ms bigint := ('x' || lpad(substr(hex, 1, 12), 16, '0'))::bit(64)::bigint;
    -- The version (4 bits), the fingerprint (10) and the ID's top 2 bits.
    high integer := ('x' || substr(hex, 13, 4))::bit(16)::integer;
    -- The variant (2 bits) and the ID's low 62 bits.
    low bigint := ('x' || substr(hex, 17, 16))::bit(64)::bigint;
    id bigint;
BEGIN
    IF high >> 12 <> 7 THEN
        RAISE EXCEPTION 'uuid % is not an id''s: uuid is of version %: an id''s uuid is of version 7',
            uuid, high >> 12 USING ERRCODE = '22023';
    END IF;
    IF (low >> 62) & 3 <> 2 THEN
        RAISE EXCEPTION 'uuid % is not an id''s: uuid has variant bits 0b%: an id''s uuid has RFC 9562''s 0b10',
            uuid, ((low >> 62) & 3)::bit(2) USING ERRCODE = '22023';
    END IF;
    IF (high >> 2) & 1023 <> {uuid_fingerprint} THEN
        RAISE EXCEPTION 'uuid % is not an id''s: uuid carries layout fingerprint %: this layout''s is {uuid_fingerprint}',
            uuid, (high >> 2) & 1023 USING ERRCODE = '22023';
    END IF;
    IF high & 2 <> 0 THEN
        RAISE EXCEPTION {uuid_past_bigint},
            uuid, (high & 3)::numeric * 4611686018427387904 + (low & 4611686018427387903)
            USING ERRCODE = {uuid_past_bigint_code};
    END IF;
    id := ((high & 3)::bigint << 62) | (low & 4611686018427387903);
    IF id > {max_id} THEN
        RAISE EXCEPTION 'uuid % is not an id''s: id % is out of range: the layout allows 0..={max_id}',
            uuid, id USING ERRCODE = '22023';
    END IF;
    IF ms <> {p}_unix_ms(id) THEN
        RAISE EXCEPTION 'uuid % is not an id''s: uuid''s unix_ts_ms % is not its id''s time % ms',
            uuid, ms, {p}_unix_ms(id) USING ERRCODE = '22023';
    END IF;
    RETURN id;
END
$body$;
{adoptions}
COMMIT;
