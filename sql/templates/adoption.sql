-- Adopt {table}.{column}: new rows take {p}_next_id(). In one statement, under an ACCESS
-- EXCLUSIVE lock on the table: the column must be bigint (and every foreign key to it),
-- and every value in it below the first id of the tick {p}_next_id() mints at; then its
-- default becomes {p}_next_id() and its identity (with its sequence) or its sequence's
-- ownership goes. Nothing is done for a column whose default already calls it. The rows
-- are read with row security off; only a table is taken; lock_timeout bounds the lock.
DO $adopt$
{body}
$adopt$;
