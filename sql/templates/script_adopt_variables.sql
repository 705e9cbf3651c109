    what text := '{table}.{column}';
    tbl regclass := to_regclass('{table}');
    col name := '{column}';
    mint text := format('%I.%I()', current_schema(), '{p}_next_id');

