//! What a namespace holds, as people read it: [`list`].

use super::{Engine, LeaseError, check_namespace, off_runtime};
use std::collections::BTreeMap;

/// One node of a namespace ([`list`]): claimed now, or claimed once (its mark remains).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseRow {
    /// The node.
    pub node: u64,
    /// Whether a live claim holds it.
    pub live: bool,
    /// The holder's name: while live, or for an engine that keeps it (PostgreSQL), the
    /// last holder's.
    pub holder: Option<String>,
    /// The claim's generation ([`Lease::generation`](super::Lease::generation)), while
    /// live or where the engine keeps it.
    pub generation: Option<i64>,
    /// When the claim expires (or expired), Unix ms by the engine's clock, for an engine
    /// that keeps it in the row (PostgreSQL).
    pub expires_unix_ms: Option<i64>,
    /// The node's high-water mark, Unix ms (0 when none was stored): every ID minted on it
    /// has an earlier time.
    pub high_water_ms: u64,
}

impl LeaseRow {
    /// A node with a mark and no claim.
    pub fn new(node: u64, high_water_ms: u64) -> LeaseRow {
        LeaseRow {
            node,
            live: false,
            holder: None,
            generation: None,
            expires_unix_ms: None,
            high_water_ms,
        }
    }

    /// This row, held by a live claim of `holder` with `generation`.
    #[must_use]
    pub fn held(mut self, holder: String, generation: i64) -> LeaseRow {
        self.live = true;
        self.holder = Some(holder);
        self.generation = Some(generation);
        self
    }

    /// This row, with the claim's expiry as the engine keeps it.
    #[must_use]
    pub fn expires(mut self, unix_ms: i64, live: bool) -> LeaseRow {
        self.expires_unix_ms = Some(unix_ms);
        self.live = live;
        self
    }

    /// The rows of an engine that keeps marks and live claims apart (etcd's keys,
    /// ZooKeeper's nodes): every node with a mark or a claim, by node. `claims` holds each
    /// live claim's node, holder and generation.
    pub fn merge(
        marks: impl IntoIterator<Item = (u64, u64)>,
        claims: impl IntoIterator<Item = (u64, String, i64)>,
    ) -> Vec<LeaseRow> {
        let mut rows: BTreeMap<u64, LeaseRow> = marks
            .into_iter()
            .map(|(node, mark)| (node, LeaseRow::new(node, mark)))
            .collect();
        for (node, holder, generation) in claims {
            let row = rows.remove(&node).unwrap_or_else(|| LeaseRow::new(node, 0));
            rows.insert(node, row.held(holder, generation));
        }
        rows.into_values().collect()
    }
}

/// Every node of `namespace` on the engine at `config` that is claimed or has a mark, by
/// node.
///
/// # Errors
///
/// [`LeaseError::InvalidNamespace`]; [`LeaseError::Engine`] when the engine cannot be
/// reached or refuses.
pub fn list<E: Engine>(config: &E::Config, namespace: &str) -> Result<Vec<LeaseRow>, LeaseError<E::Error>> {
    check_namespace(namespace)?;
    Ok(off_runtime(|| E::list(config, namespace))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_and_claims_merge_by_node() {
        let rows = LeaseRow::merge(
            [(0, 10), (2, 30)],
            [(2, "b".to_owned(), 7), (1, "a".to_owned(), 5)],
        );
        assert_eq!(
            rows,
            [
                LeaseRow::new(0, 10),
                LeaseRow::new(1, 0).held("a".to_owned(), 5),
                LeaseRow::new(2, 30).held("b".to_owned(), 7),
            ]
        );
        assert!(rows[1].live && rows[1].expires_unix_ms.is_none());
        assert_eq!(LeaseRow::new(3, 1).expires(99, false).expires_unix_ms, Some(99));
    }
}
