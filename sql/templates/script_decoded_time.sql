(SELECT CASE WHEN ms < 9000000000000000
            THEN to_char(to_timestamp(ms / 1000.0) AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS') || ' UTC'
            ELSE ms || ' ms after 1970' END
        FROM (SELECT {ticks}::numeric * {tick_ms} + {epoch} AS ms) AS decoded)
