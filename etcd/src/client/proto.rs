//! The messages of etcd's v3 gRPC API that a lease sends and reads, with etcd's own names and
//! field numbers: a subset of package `etcdserverpb` (etcd's `api/etcdserverpb/rpc.proto`)
//! and `mvccpb.KeyValue` (`api/mvccpb/kv.proto`). Fields a lease never sets or reads are
//! left out: protobuf decoders skip fields they do not know, and an unset field is never
//! sent. Enums are `i32` fields with the values as constants.

/// `etcdserverpb.ResponseHeader`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ResponseHeader {
    /// The member that answered.
    #[prost(uint64, tag = "2")]
    pub member_id: u64,
    /// The key-value store's revision when the request was applied.
    #[prost(int64, tag = "3")]
    pub revision: i64,
}

/// `mvccpb.KeyValue`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct KeyValue {
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    /// The revision of the write that created the key (since it last did not exist).
    #[prost(int64, tag = "2")]
    pub create_revision: i64,
    /// The revision of the write that last changed the key.
    #[prost(int64, tag = "3")]
    pub mod_revision: i64,
    #[prost(bytes = "vec", tag = "5")]
    pub value: Vec<u8>,
    /// The lease the key is attached to; 0 for none.
    #[prost(int64, tag = "6")]
    pub lease: i64,
}

/// `etcdserverpb.RangeRequest`: the keys in `[key, range_end)`, or `key` alone.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct RangeRequest {
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub range_end: Vec<u8>,
}

/// `etcdserverpb.RangeResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct RangeResponse {
    #[prost(message, optional, tag = "1")]
    pub header: Option<ResponseHeader>,
    #[prost(message, repeated, tag = "2")]
    pub kvs: Vec<KeyValue>,
}

/// `etcdserverpb.PutRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct PutRequest {
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub value: Vec<u8>,
    /// The lease to attach the key to; 0 for none.
    #[prost(int64, tag = "3")]
    pub lease: i64,
}

/// `etcdserverpb.DeleteRangeRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct DeleteRangeRequest {
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
}

/// `etcdserverpb.RequestOp`: one operation of a transaction.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct RequestOp {
    #[prost(oneof = "Request", tags = "1, 2, 3")]
    pub request: Option<Request>,
}

/// `etcdserverpb.RequestOp.request`.
#[derive(Clone, PartialEq, prost::Oneof)]
pub(crate) enum Request {
    #[prost(message, tag = "1")]
    Range(RangeRequest),
    #[prost(message, tag = "2")]
    Put(PutRequest),
    #[prost(message, tag = "3")]
    DeleteRange(DeleteRangeRequest),
}

/// `etcdserverpb.ResponseOp`: the result of one operation of a transaction.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ResponseOp {
    #[prost(oneof = "Response", tags = "1")]
    pub response: Option<Response>,
}

/// `etcdserverpb.ResponseOp.response`, the one kind a lease reads.
#[derive(Clone, PartialEq, prost::Oneof)]
pub(crate) enum Response {
    #[prost(message, tag = "1")]
    Range(RangeResponse),
}

/// `etcdserverpb.Compare`: one condition of a transaction.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Compare {
    /// [`Compare::EQUAL`].
    #[prost(int32, tag = "1")]
    pub result: i32,
    /// [`Compare::CREATE`], [`Compare::MOD`] or [`Compare::LEASE`].
    #[prost(int32, tag = "2")]
    pub target: i32,
    #[prost(bytes = "vec", tag = "3")]
    pub key: Vec<u8>,
    #[prost(oneof = "Target", tags = "5, 6, 8")]
    pub target_union: Option<Target>,
}

impl Compare {
    /// `CompareResult.EQUAL`.
    pub const EQUAL: i32 = 0;
    /// `CompareTarget.CREATE`: the key's create revision (0 when it does not exist).
    pub const CREATE: i32 = 1;
    /// `CompareTarget.MOD`: the key's mod revision (0 when it does not exist).
    pub const MOD: i32 = 2;
    /// `CompareTarget.LEASE`: the lease the key is attached to.
    pub const LEASE: i32 = 4;
}

/// `etcdserverpb.Compare.target_union`, the three targets a lease compares.
#[derive(Clone, PartialEq, prost::Oneof)]
pub(crate) enum Target {
    #[prost(int64, tag = "5")]
    CreateRevision(i64),
    #[prost(int64, tag = "6")]
    ModRevision(i64),
    #[prost(int64, tag = "8")]
    Lease(i64),
}

/// `etcdserverpb.TxnRequest`: if every comparison holds, `success`, else `failure`,
/// applied atomically.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct TxnRequest {
    #[prost(message, repeated, tag = "1")]
    pub compare: Vec<Compare>,
    #[prost(message, repeated, tag = "2")]
    pub success: Vec<RequestOp>,
    #[prost(message, repeated, tag = "3")]
    pub failure: Vec<RequestOp>,
}

/// `etcdserverpb.TxnResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct TxnResponse {
    #[prost(message, optional, tag = "1")]
    pub header: Option<ResponseHeader>,
    #[prost(bool, tag = "2")]
    pub succeeded: bool,
    #[prost(message, repeated, tag = "3")]
    pub responses: Vec<ResponseOp>,
}

/// `etcdserverpb.LeaseGrantRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct LeaseGrantRequest {
    /// Seconds.
    #[prost(int64, tag = "1")]
    pub ttl: i64,
}

/// `etcdserverpb.LeaseGrantResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct LeaseGrantResponse {
    #[prost(int64, tag = "2")]
    pub id: i64,
    /// The time to live the server chose, seconds: at least the one asked for.
    #[prost(int64, tag = "3")]
    pub ttl: i64,
    #[prost(string, tag = "4")]
    pub error: String,
}

/// `etcdserverpb.LeaseRevokeRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct LeaseRevokeRequest {
    #[prost(int64, tag = "1")]
    pub id: i64,
}

/// `etcdserverpb.LeaseRevokeResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct LeaseRevokeResponse {}

/// `etcdserverpb.LeaseKeepAliveRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct LeaseKeepAliveRequest {
    #[prost(int64, tag = "1")]
    pub id: i64,
}

/// `etcdserverpb.LeaseKeepAliveResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct LeaseKeepAliveResponse {
    #[prost(int64, tag = "2")]
    pub id: i64,
    /// Seconds left after the renewal; 0 or less when the lease no longer exists.
    #[prost(int64, tag = "3")]
    pub ttl: i64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    /// A transaction that creates a key only if it does not exist, byte by byte as the
    /// protobuf wire format has it (field number << 3 | wire type, then the value): the
    /// defaults (result EQUAL, an empty failure list) are not sent; a oneof member is,
    /// even when 0.
    #[test]
    fn a_transaction_encodes_with_etcds_field_numbers() {
        let txn = TxnRequest {
            compare: vec![Compare {
                result: Compare::EQUAL,
                target: Compare::CREATE,
                key: b"k".to_vec(),
                target_union: Some(Target::CreateRevision(0)),
            }],
            success: vec![RequestOp {
                request: Some(Request::Put(PutRequest {
                    key: b"k".to_vec(),
                    value: b"v".to_vec(),
                    lease: 7,
                })),
            }],
            failure: vec![],
        };
        #[rustfmt::skip]
        let expected = [
            0x0a, 0x07,             // compare (1), 7 bytes:
            0x10, 0x01,             //   target (2) = CREATE
            0x1a, 0x01, b'k',       //   key (3)
            0x28, 0x00,             //   create_revision (5) = 0
            0x12, 0x0a,             // success (2), 10 bytes:
            0x12, 0x08,             //   request_put (2), 8 bytes:
            0x0a, 0x01, b'k',       //     key (1)
            0x12, 0x01, b'v',       //     value (2)
            0x18, 0x07,             //     lease (3) = 7
        ];
        assert_eq!(txn.encode_to_vec(), expected);
        assert_eq!(TxnRequest::decode(&expected[..]).unwrap(), txn);
    }

    /// A keep-alive answer for a lease that no longer exists: TTL absent, read as 0.
    #[test]
    fn an_answer_without_a_field_reads_its_default() {
        let answer = LeaseKeepAliveResponse::decode(&[0x10, 0x05][..]).unwrap();
        assert_eq!((answer.id, answer.ttl), (5, 0));
    }
}

/// `etcdserverpb.AuthenticateRequest`: a user's name and password, for a token. Its
/// `Debug` leaves the password out.
#[derive(Clone, PartialEq, prost::Message)]
#[prost(skip_debug)]
pub(crate) struct AuthenticateRequest {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub password: String,
}

impl core::fmt::Debug for AuthenticateRequest {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("AuthenticateRequest")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// `etcdserverpb.AuthenticateResponse`: the token to send as the `token` metadata of every
/// request.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct AuthenticateResponse {
    #[prost(string, tag = "2")]
    pub token: String,
}
