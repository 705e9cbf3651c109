DECLARE
    next_free bigint;
    slot bigint;
    now_ms bigint;
BEGIN{guard}
    LOOP
        now_ms := {now};
        -- Take a slot only when the next one is an ID at now_ms.
        next_free := coalesce(pg_sequence_last_value(@state@) + 1, 0);
        IF now_ms >= {epoch} AND {next_tick} >= {now_tick} AND (next_free & {counter_mask}) < {per_tick} THEN
            slot := nextval(@state@);
            IF (slot & {counter_mask}) < {per_tick} THEN
                RETURN {id};
            END IF;
            -- Other calls spent the tick in between: the slot is dropped.
        ELSE
            -- Stale, spent, or a time outside the span: wait and jump, or raise.
            PERFORM @advance@(next_free, now_ms, {may_wait});
        END IF;
    END LOOP;
END
