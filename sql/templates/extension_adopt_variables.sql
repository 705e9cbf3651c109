    what text := format('%s.%I', tbl, col);
    mint text := '@extschema@.atomflake_next_id()';

