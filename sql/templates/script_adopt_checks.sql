    IF tbl IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '42P01', MESSAGE = format(
            'cannot adopt column %s: there is no table {table}', what);
    END IF;

