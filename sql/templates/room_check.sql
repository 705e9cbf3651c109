IF current_setting('max_connections')::int + current_setting('max_worker_processes')::int + current_setting('max_wal_senders')::int + current_setting('autovacuum_max_workers')::int > {headroom} THEN
        RAISE EXCEPTION USING ERRCODE = '53400', MESSAGE = format(
            'this server runs up to %s sessions at once (max_connections %s + max_worker_processes %s + max_wal_senders %s + autovacuum_max_workers %s), more than the {headroom} that {p}''s state has room for (layout {layout})',
            current_setting('max_connections')::int + current_setting('max_worker_processes')::int + current_setting('max_wal_senders')::int + current_setting('autovacuum_max_workers')::int, current_setting('max_connections'), current_setting('max_worker_processes'), current_setting('max_wal_senders'), current_setting('autovacuum_max_workers')),
            HINT = 'lower these settings, or use a layout with more sequence bits or fewer timestamp bits';
    END IF;
