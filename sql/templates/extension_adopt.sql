CREATE FUNCTION @extschema@.atomflake_adopt(tbl regclass, col name) RETURNS void
LANGUAGE plpgsql VOLATILE STRICT AS $adopt$
{body}
$adopt$;
