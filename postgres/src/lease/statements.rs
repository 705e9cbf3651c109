//! The statements a lease runs, and the table they run on.

/// The table every lease lives in, always in schema `public` (never found through the
/// session's `search_path`, so that every process of a fleet uses one table whatever its
/// role's settings): created by [`Lease::acquire`](atomflake_lease::Lease::acquire) when missing, and printed by
/// `atomflake lease ddl` for migration tools. One row per `(namespace, node)` ever
/// claimed.
///
/// `generation` counts a node's claims, for people reading the table; `token` is the
/// fence: a random UUID drawn by the server for each claim, never reused, so a holder
/// whose claim was lost (a deleted row, a commit the server lost) can never renew or
/// store a mark on its successor's claim.
///
/// Never delete a row of a namespace in use: it holds the node's high-water mark, and a
/// node claimed without its row starts from the claimant's clock.
pub const DDL: &str = "\
CREATE TABLE IF NOT EXISTS public.atomflake_lease (
    namespace     text        NOT NULL,
    node          bigint      NOT NULL CHECK (node >= 0),
    holder        text        NOT NULL,
    generation    bigint      NOT NULL,
    token         uuid        NOT NULL,
    expires_at    timestamptz NOT NULL,
    high_water_ms bigint      NOT NULL CHECK (high_water_ms >= 0),
    PRIMARY KEY (namespace, node)
);
";

/// Makes claimants of one namespace take turns, until their transaction ends. `$1`
/// namespace. (A key pair of its own: the one-number key that `create_table` takes is
/// another lock space.)
pub(super) const CLAIM_TURN: &str = "SELECT pg_advisory_xact_lock(hashtext('atomflake_lease'), hashtext($1))";

/// Claims the lowest node of `$2..=$3` that no live lease holds and whose mark is at most
/// `$6` (Unix ms). `$1` namespace, `$4` holder, `$5` lease time in ms. Reads only the
/// namespace's rows (an expired row, or the first node without a row), never the whole
/// node range: as cheap on 65,536 nodes as on 16.
pub(super) const CLAIM: &str = "
WITH candidate AS (
    SELECT min(n) AS node FROM (
        (SELECT node AS n FROM public.atomflake_lease
         WHERE namespace = $1 AND node BETWEEN $2 AND $3
           AND expires_at <= clock_timestamp() AND high_water_ms <= $6
         ORDER BY node LIMIT 1)
        UNION ALL
        (SELECT g.n FROM (
             SELECT $2::bigint AS n
             UNION ALL
             SELECT node + 1 FROM public.atomflake_lease
             WHERE namespace = $1 AND node >= $2 AND node < $3) AS g
         WHERE NOT EXISTS (
             SELECT 1 FROM public.atomflake_lease l WHERE l.namespace = $1 AND l.node = g.n)
         ORDER BY g.n LIMIT 1)
    ) AS free
)
INSERT INTO public.atomflake_lease AS l
    (namespace, node, holder, generation, token, expires_at, high_water_ms)
SELECT $1, node, $4, 1, gen_random_uuid(), clock_timestamp() + $5::bigint * interval '1 millisecond', 0
FROM candidate
WHERE node IS NOT NULL
ON CONFLICT (namespace, node) DO UPDATE
    SET holder = excluded.holder,
        generation = l.generation + 1,
        token = excluded.token,
        expires_at = excluded.expires_at
    WHERE l.expires_at <= clock_timestamp()
RETURNING l.node, l.generation, l.token::text, l.high_water_ms";

/// After a claim that found nothing: how many nodes of `$2..=$3` live leases hold, and
/// the lowest free node whose mark is past `$4`, with that mark. `$1` namespace.
pub(super) const NOTHING_CLAIMED: &str = "
SELECT count(*) FILTER (WHERE expires_at > clock_timestamp()),
       min(node) FILTER (WHERE expires_at <= clock_timestamp() AND high_water_ms > $4),
       min(high_water_ms) FILTER (WHERE expires_at <= clock_timestamp() AND high_water_ms > $4)
FROM public.atomflake_lease
WHERE namespace = $1 AND node BETWEEN $2 AND $3";

/// The free nodes of `$2..=$3` whose marks are past `$4`: passed over by a claim. `$1`
/// namespace.
pub(super) const PASSED_OVER: &str = "
SELECT node, high_water_ms FROM public.atomflake_lease
WHERE namespace = $1 AND node BETWEEN $2 AND $3
  AND expires_at <= clock_timestamp() AND high_water_ms > $4
ORDER BY node
LIMIT 16";

/// Stores a mark and renews: only while the claim is the holder's. `$1` namespace, `$2`
/// node, `$3` token, `$4` lease time in ms, `$5` mark.
pub(super) const RENEW: &str = "
UPDATE public.atomflake_lease
SET expires_at = clock_timestamp() + $4::bigint * interval '1 millisecond',
    high_water_ms = GREATEST(high_water_ms, $5::bigint)
WHERE namespace = $1 AND node = $2 AND token = $3::text::uuid";

/// Stores the last mark and expires the row. `$1` namespace, `$2` node, `$3` token, `$4`
/// mark.
pub(super) const RELEASE: &str = "
UPDATE public.atomflake_lease
SET expires_at = clock_timestamp(),
    high_water_ms = GREATEST(high_water_ms, $4::bigint)
WHERE namespace = $1 AND node = $2 AND token = $3::text::uuid";

/// Stores the mark that covers exactly what the holder minted, which may be below the
/// stored one, and expires the row. `$1` namespace, `$2` node, `$3` token, `$4` mark.
pub(super) const RELEASE_FINISHED: &str = "
UPDATE public.atomflake_lease
SET expires_at = clock_timestamp(),
    high_water_ms = $4::bigint
WHERE namespace = $1 AND node = $2 AND token = $3::text::uuid";

/// Every row of a namespace. `$1` namespace.
pub(super) const LIST: &str = "
SELECT node, holder, generation,
       (extract(epoch FROM expires_at) * 1000)::bigint,
       expires_at > clock_timestamp(),
       high_water_ms
FROM public.atomflake_lease
WHERE namespace = $1
ORDER BY node";

/// Raises the session's `synchronous_commit` to `on` unless it is `remote_apply`: a claim
/// or a renewal is on disk (and on a synchronous standby, where there is one) before the
/// holder relies on it, whatever the server's default.
pub(super) const DURABLE: &str = "
SELECT set_config('synchronous_commit', 'on', false)
WHERE current_setting('synchronous_commit') <> 'remote_apply'";
