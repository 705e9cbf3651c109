
    now_ms := {clock};
    IF unix_ms > now_ms + {max_ahead_ms} THEN
        RAISE EXCEPTION USING ERRCODE = '22008', MESSAGE = format(
            'time %s ms is %s ms ahead of the clock: {p}_next_id_at mints at most {max_ahead_ms} ms ahead',
            unix_ms, unix_ms - now_ms);
    END IF;
