//! The keys of a namespace, and what their values hold.

use super::EtcdError;
use crate::client::proto::{KeyValue, RangeRequest, Response, ResponseOp};

/// The keys of one namespace: `holder/NODE` and `mark/NODE` under
/// `/atomflake/lease/NAMESPACE/`, the node in 20 digits so that keys sort as numbers.
#[derive(Debug, Clone)]
pub(super) struct Keys {
    pub(super) holders: String,
    pub(super) marks: String,
}

impl Keys {
    pub(super) fn new(namespace: &str) -> Keys {
        let prefix = Keys::prefix(namespace);
        Keys {
            holders: format!("{prefix}holder/"),
            marks: format!("{prefix}mark/"),
        }
    }

    /// The prefix of every key of `namespace`: what an etcd role needs readwrite on.
    pub(super) fn prefix(namespace: &str) -> String {
        format!("/atomflake/lease/{namespace}/")
    }

    pub(super) fn holder(&self, node: u64) -> Vec<u8> {
        format!("{}{node:020}", self.holders).into_bytes()
    }

    pub(super) fn mark(&self, node: u64) -> Vec<u8> {
        format!("{}{node:020}", self.marks).into_bytes()
    }

    /// Every key under `prefix`.
    pub(super) fn under(prefix: &str) -> RangeRequest {
        let mut range_end = prefix.as_bytes().to_vec();
        // The prefix ends in '/': the first key past every key that starts with it.
        *range_end.last_mut().expect("a prefix is not empty") += 1;
        RangeRequest {
            key: prefix.as_bytes().to_vec(),
            range_end,
        }
    }

    /// The node of a key under `prefix`.
    pub(super) fn node(prefix: &str, kv: &KeyValue) -> Result<u64, EtcdError> {
        let key = String::from_utf8_lossy(&kv.key);
        key.strip_prefix(prefix)
            .filter(|digits| digits.len() == 20)
            .and_then(|digits| digits.parse().ok())
            .ok_or_else(|| EtcdError::Corrupt {
                key: key.clone().into_owned(),
                problem: "the key does not end in a node number of 20 digits".to_owned(),
            })
    }

    /// A mark key's value.
    pub(super) fn mark_value(kv: &KeyValue) -> Result<u64, EtcdError> {
        std::str::from_utf8(&kv.value)
            .ok()
            .and_then(|text| text.parse().ok())
            .ok_or_else(|| EtcdError::Corrupt {
                key: String::from_utf8_lossy(&kv.key).into_owned(),
                problem: "the value is not a mark in decimal Unix ms".to_owned(),
            })
    }
}

/// The keys read by the range operations of a transaction's answer, in order.
pub(super) fn ranges(responses: Vec<ResponseOp>) -> Vec<KeyValue> {
    responses
        .into_iter()
        .filter_map(|response| match response.response {
            Some(Response::Range(range)) => Some(range.kvs),
            None => None,
        })
        .flatten()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_as_numbers_and_read_back() {
        let keys = Keys::new("ns");
        assert_eq!(keys.holder(7), b"/atomflake/lease/ns/holder/00000000000000000007");
        assert!(keys.mark(9) < keys.mark(10));
        let range = Keys::under(&keys.marks);
        assert_eq!(range.range_end, b"/atomflake/lease/ns/mark0");
        let kv = |key: &[u8], value: &[u8]| KeyValue {
            key: key.to_vec(),
            value: value.to_vec(),
            ..KeyValue::default()
        };
        assert_eq!(
            Keys::node(&keys.marks, &kv(&keys.mark(u64::MAX), b"")).unwrap(),
            u64::MAX
        );
        assert_eq!(
            Keys::mark_value(&kv(&keys.mark(1), b"1700000000000")).unwrap(),
            1_700_000_000_000
        );
        assert_eq!(
            Keys::mark_value(&kv(&keys.mark(1), b"-1")).unwrap_err(),
            EtcdError::Corrupt {
                key: "/atomflake/lease/ns/mark/00000000000000000001".to_owned(),
                problem: "the value is not a mark in decimal Unix ms".to_owned()
            }
        );
        assert!(matches!(
            Keys::node(&keys.marks, &kv(b"/atomflake/lease/ns/mark/7", b"1")),
            Err(EtcdError::Corrupt { .. })
        ));
    }
}
