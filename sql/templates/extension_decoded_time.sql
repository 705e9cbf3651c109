to_char(@extschema@.atomflake_time({id}) AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS') || ' UTC'
