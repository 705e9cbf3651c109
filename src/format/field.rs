//! [`Field`]: the name of an ID's bounded field, which the range errors and the layout
//! share. A module of its own so that both depend on it, and neither on the other for it.

use core::fmt;

/// A field of an ID, as [`RangeError::FieldOutOfRange`](crate::RangeError::FieldOutOfRange) names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Field {
    /// The node (machine, worker, shard) field.
    Node,
    /// The per-tick sequence field.
    Sequence,
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Field::Node => "node",
            Field::Sequence => "sequence",
        })
    }
}
