//! Simple node sources: a node ID that the fleet assigns itself, read from an environment
//! variable or from a Kubernetes StatefulSet pod's ordinal.
//!
//! ```no_run
//! use atomflake::{node, Generator, Layout};
//!
//! let node = node::from_statefulset(&Layout::TWITTER)?; // pod orders-7: node 7
//! let generator = Generator::new(Layout::TWITTER, node)?;
//! # Ok::<(), atomflake::Error>(())
//! ```
//!
//! Each source reads a decimal node ID and checks it against the layout's node field,
//! `0..=`[`Layout::max_node`]; a value outside it is an error
//! ([`NodeSourceError::OutOfRange`]), never wrapped or masked. None of them coordinates
//! with anything: a node ID is only as unique as its source makes it, and two live
//! generators of one layout with the same node ID mint the same IDs.
//!
//! | source | unique among | not unique when |
//! |---|---|---|
//! | [`from_env`] | the processes that whoever sets it gives distinct values | two processes get one value |
//! | [`from_statefulset`], [`from_statefulset_ordinal`] | the live pods of one StatefulSet | a pod is force-deleted while its process still runs; two StatefulSets share one node space |
//!
//! # Environment variable
//!
//! [`from_env`] reads a variable such as `ATOMFLAKE_NODE`. It is as unique as whoever sets
//! it: a template or unit file copied with its value, or two replicas of one deployment
//! given the same value, collide without any error.
//!
//! # StatefulSet ordinal
//!
//! Kubernetes names the pods of a StatefulSet `<statefulset-name>-<ordinal>` (`orders-0`,
//! `orders-1`, ..., from `.spec.ordinals.start` when that is set) and makes each pod's
//! hostname its name. [`from_statefulset`] takes the ordinal of that hostname as the node
//! ID. The StatefulSet controller starts a pod for an ordinal only once the API server has
//! no other pod with that ordinal, so the ordinal is unique among the live pods of one
//! StatefulSet. Its limits:
//!
//! - A pod that is force-deleted (`kubectl delete pod --force --grace-period=0`), or
//!   deleted while its node is unreachable, is removed from the API server without its
//!   process having stopped. The controller then starts a replacement with the same
//!   ordinal, while the old process may still run on a partitioned node: two generators
//!   with one node ID. A lease protects against exactly this case: the node ID is held in
//!   a shared store for a limited time, and a process that cannot renew its hold stops
//!   minting before another can take the node ID.
//! - The ordinal is unique within one StatefulSet only: `orders-0` and `billing-0` both
//!   read node 0. Two StatefulSets whose IDs meet (one table, one topic) collide; give each
//!   its own ID space (a layout or table of its own) or use a lease.
//! - A pod whose ordinal is above [`Layout::max_node`] (more replicas than the layout has
//!   node IDs, or a high `.spec.ordinals.start`) gets [`NodeSourceError::OutOfRange`].
//! - A restarted pod keeps its ordinal, so its node ID: across restarts the crate's
//!   [guarantees](crate#guarantees) hold as for any process, and a
//!   [high-water file](crate::Builder::high_water_file) belongs on the pod's persistent
//!   volume.
//!
//! The downward API gives the same through a variable of the container's `env`: the pod's
//! name (`fieldRef: {fieldPath: metadata.name}`) for [`from_statefulset_ordinal`], or the
//! ordinal itself (`metadata.labels['apps.kubernetes.io/pod-index']`) for [`from_env`].

use crate::format::layout::Layout;
use crate::io::IoCause;
use core::fmt;
use std::env;
use std::ffi::{OsStr, OsString};
use std::fs;
use std::path::Path;

/// Where [`from_statefulset`] reads the hostname when `HOSTNAME` is unset or empty.
const HOSTNAME_FILE: &str = "/etc/hostname";

/// Reads a node ID from the environment variable `var`: a decimal number, with surrounding
/// ASCII whitespace ignored, in `0..=layout.max_node()`.
///
/// # Errors
///
/// [`NodeSourceError::Missing`] when `var` is not set, [`NodeSourceError::NotUnicode`] when
/// its value is not valid Unicode, [`NodeSourceError::NotANumber`] when it is not a decimal
/// number that fits a `u64` (a sign, hex, empty), [`NodeSourceError::OutOfRange`] when it is
/// above [`Layout::max_node`].
///
/// # Examples
///
/// ```no_run
/// use atomflake::{node, Generator, Layout};
///
/// // ATOMFLAKE_NODE=7
/// let node = node::from_env("ATOMFLAKE_NODE", &Layout::TWITTER)?;
/// let generator = Generator::new(Layout::TWITTER, node)?;
/// # Ok::<(), atomflake::Error>(())
/// ```
pub fn from_env(var: &str, layout: &Layout) -> Result<u64, NodeSourceError> {
    from_var(var, env::var_os(var), layout)
}

/// [`from_env`] on the variable's value, as read.
fn from_var(var: &str, value: Option<OsString>, layout: &Layout) -> Result<u64, NodeSourceError> {
    let max = layout.max_node();
    let Some(value) = value else {
        return Err(NodeSourceError::Missing {
            var: var.to_owned(),
            max,
        });
    };
    match value.into_string() {
        Ok(value) => parse_node(var, &value, layout),
        Err(_) => Err(NodeSourceError::NotUnicode {
            var: var.to_owned(),
            max,
        }),
    }
}

/// Reads a node ID from a Kubernetes StatefulSet pod's hostname, `<statefulset-name>-<ordinal>`:
/// the ordinal, the decimal digits after the last `-`, is the node ID.
///
/// The hostname is taken as given: no whitespace is trimmed.
///
/// # Errors
///
/// [`NodeSourceError::NoOrdinal`] when the hostname has no `-`, nothing before or after the
/// last one, anything but the digits 0-9 after it, or leading zeros (Kubernetes writes none);
/// [`NodeSourceError::NotANumber`] when the ordinal has more digits than a `u64` holds;
/// [`NodeSourceError::OutOfRange`] when it is above [`Layout::max_node`].
///
/// # Examples
///
/// ```
/// use atomflake::Layout;
/// use atomflake::node::NodeSourceError;
/// use atomflake::node::from_statefulset_ordinal;
///
/// assert_eq!(from_statefulset_ordinal("orders-7", &Layout::TWITTER), Ok(7));
/// assert_eq!(from_statefulset_ordinal("web-api-12", &Layout::TWITTER), Ok(12));
/// assert_eq!(
///     from_statefulset_ordinal("orders-1024", &Layout::TWITTER),
///     Err(NodeSourceError::OutOfRange {
///         source_name: "hostname \"orders-1024\"".into(),
///         node: 1024,
///         max: 1023,
///     }),
/// );
/// ```
pub fn from_statefulset_ordinal(hostname: &str, layout: &Layout) -> Result<u64, NodeSourceError> {
    match hostname.rsplit_once('-') {
        Some((name, ordinal)) if !name.is_empty() && is_ordinal(ordinal) => {
            node_in_range(&format!("hostname {hostname:?}"), ordinal, ordinal, layout)
        }
        _ => Err(NodeSourceError::NoOrdinal {
            hostname: hostname.to_owned(),
            max: layout.max_node(),
        }),
    }
}

/// Reads a node ID from this pod's StatefulSet ordinal: [`from_statefulset_ordinal`] on the
/// hostname, taken from the `HOSTNAME` environment variable (which Kubernetes sets), or
/// from `/etc/hostname` when `HOSTNAME` is unset or empty, with surrounding ASCII whitespace
/// trimmed.
///
/// # Errors
///
/// [`NodeSourceError::Hostname`] when `HOSTNAME` is unset or empty and `/etc/hostname`
/// cannot be read; otherwise those of [`from_statefulset_ordinal`].
///
/// # Examples
///
/// ```no_run
/// use atomflake::{node, Generator, Layout};
///
/// // In pod orders-7 of StatefulSet orders: node 7.
/// let node = node::from_statefulset(&Layout::TWITTER)?;
/// let generator = Generator::new(Layout::TWITTER, node)?;
/// # Ok::<(), atomflake::Error>(())
/// ```
pub fn from_statefulset(layout: &Layout) -> Result<u64, NodeSourceError> {
    let hostname = read_hostname(env::var_os("HOSTNAME").as_deref(), Path::new(HOSTNAME_FILE))?;
    from_statefulset_ordinal(&hostname, layout)
}

/// The hostname: `env` (the value of `HOSTNAME`) unless unset or empty, else the contents
/// of `file`, trimmed. Bytes that are not valid UTF-8 become U+FFFD: no such replacement is
/// a `-` or a digit, so the ordinal read from the result is the one in the bytes.
fn read_hostname(env: Option<&OsStr>, file: &Path) -> Result<String, NodeSourceError> {
    if let Some(hostname) = env.map(|env| env.to_string_lossy().trim_ascii().to_owned())
        && !hostname.is_empty()
    {
        return Ok(hostname);
    }
    let bytes = fs::read(file).map_err(|error| NodeSourceError::Hostname {
        cause: IoCause::from(error),
    })?;
    Ok(String::from_utf8_lossy(&bytes).trim_ascii().to_owned())
}

/// Parses `value`, from `source_name`, as a node ID of `layout`: decimal digits only, with
/// surrounding ASCII whitespace ignored.
fn parse_node(source_name: &str, value: &str, layout: &Layout) -> Result<u64, NodeSourceError> {
    let digits = value.trim_ascii();
    if digits.is_empty() || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return Err(NodeSourceError::NotANumber {
            source_name: source_name.to_owned(),
            value: value.to_owned(),
            max: layout.max_node(),
        });
    }
    node_in_range(source_name, digits, value, layout)
}

/// Whether `text` is an ordinal as Kubernetes writes one: decimal digits, no leading zeros.
fn is_ordinal(text: &str) -> bool {
    !text.is_empty()
        && text.bytes().all(|byte| byte.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'))
}

/// `digits` (one or more ASCII digits, read from `value`) as a node of `layout`.
fn node_in_range(
    source_name: &str,
    digits: &str,
    value: &str,
    layout: &Layout,
) -> Result<u64, NodeSourceError> {
    let max = layout.max_node();
    // Only digits are left, so parsing fails only on a number above u64::MAX.
    let Ok(node) = digits.parse::<u64>() else {
        return Err(NodeSourceError::NotANumber {
            source_name: source_name.to_owned(),
            value: value.to_owned(),
            max,
        });
    };
    if node > max {
        return Err(NodeSourceError::OutOfRange {
            source_name: source_name.to_owned(),
            node,
            max,
        });
    }
    Ok(node)
}

/// A node ID that a [`node`](crate::node) source could not read, or that does not fit the
/// layout's node field.
///
/// # Examples
///
/// ```
/// use atomflake::Layout;
/// use atomflake::node::NodeSourceError;
/// use atomflake::node::from_statefulset_ordinal;
///
/// let err = from_statefulset_ordinal("orders", &Layout::TWITTER).unwrap_err();
/// assert_eq!(err, NodeSourceError::NoOrdinal { hostname: "orders".into(), max: 1023 });
/// assert_eq!(
///     err.to_string(),
///     "hostname \"orders\" has no statefulset ordinal: expected <name>-<N> with N in 0..=1023, \
///      written without leading zeros",
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NodeSourceError {
    /// The environment variable is not set. Permanent for this process: its environment
    /// does not change.
    Missing {
        /// The variable's name.
        var: String,
        /// The largest node the layout holds.
        max: u64,
    },
    /// The environment variable holds bytes that are not valid Unicode. Permanent for this
    /// process.
    NotUnicode {
        /// The variable's name.
        var: String,
        /// The largest node the layout holds.
        max: u64,
    },
    /// The value is not a decimal number that fits a `u64`: empty, a sign, hex, other
    /// characters, or more digits than a `u64` holds. Permanent.
    NotANumber {
        /// Where the value came from: the environment variable's name, or
        /// `hostname "<hostname>"` for a StatefulSet ordinal.
        source_name: String,
        /// The value found (for an environment variable, before trimming).
        value: String,
        /// The largest node the layout holds.
        max: u64,
    },
    /// The hostname does not end in a StatefulSet ordinal `-<N>`: it has no `-`, nothing
    /// before or after the last one, something other than the digits 0-9 after it, or
    /// leading zeros. Permanent.
    NoOrdinal {
        /// The hostname.
        hostname: String,
        /// The largest node the layout holds.
        max: u64,
    },
    /// A node above the layout's node field. Permanent for this layout.
    OutOfRange {
        /// Where the node came from: the environment variable's name, or
        /// `hostname "<hostname>"` for a StatefulSet ordinal.
        source_name: String,
        /// The node found.
        node: u64,
        /// The largest node the layout holds.
        max: u64,
    },
    /// No hostname: `HOSTNAME` is not set (or empty) and `/etc/hostname` could not be read.
    /// Transient or permanent as the operating system's error is; the error is the
    /// [`source`](std::error::Error::source).
    Hostname {
        /// What the operating system reported for `/etc/hostname`.
        cause: IoCause,
    },
}

impl fmt::Display for NodeSourceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeSourceError::Missing { var, max } => write!(
                f,
                "environment variable {var} is not set: it should hold this process's node id, \
                 a decimal number in 0..={max}"
            ),
            NodeSourceError::NotUnicode { var, max } => write!(
                f,
                "environment variable {var} is not valid unicode: expected a decimal node id \
                 in 0..={max}"
            ),
            NodeSourceError::NotANumber {
                source_name,
                value,
                max,
            } => write!(
                f,
                "{value:?} from {source_name} is not a node id: expected a decimal number in 0..={max}"
            ),
            NodeSourceError::NoOrdinal { hostname, max } => write!(
                f,
                "hostname {hostname:?} has no statefulset ordinal: expected <name>-<N> with N in \
                 0..={max}, written without leading zeros"
            ),
            NodeSourceError::OutOfRange {
                source_name,
                node,
                max,
            } => write!(
                f,
                "node {node} from {source_name} is out of range: the layout allows 0..={max}"
            ),
            NodeSourceError::Hostname { cause } => write!(
                f,
                "could not find the hostname: HOSTNAME is unset or empty and /etc/hostname could not \
                 be read: {cause}"
            ),
        }
    }
}

impl std::error::Error for NodeSourceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            NodeSourceError::Hostname { cause } => Some(cause.get()),
            _ => None,
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::Error;
    use std::error::Error as _;
    use std::io;

    /// A layout with a 4-bit node field: nodes 0..=15.
    fn four_bit() -> Layout {
        Layout::builder()
            .timestamp_bits(41)
            .node_bits(4)
            .sequence_bits(12)
            .build()
            .unwrap()
    }

    fn not_a_number(source_name: &str, value: &str, max: u64) -> NodeSourceError {
        NodeSourceError::NotANumber {
            source_name: source_name.to_owned(),
            value: value.to_owned(),
            max,
        }
    }

    fn out_of_range(source_name: &str, node: u64, max: u64) -> NodeSourceError {
        NodeSourceError::OutOfRange {
            source_name: source_name.to_owned(),
            node,
            max,
        }
    }

    /// Checks that `result` is the error `expected` and says `text`; returns it.
    fn refused(
        result: Result<u64, NodeSourceError>,
        expected: &NodeSourceError,
        text: &str,
    ) -> NodeSourceError {
        let err = result.unwrap_err();
        assert_eq!(&err, expected);
        assert_eq!(err.to_string(), text);
        err
    }

    fn no_ordinal(hostname: &str, max: u64) -> NodeSourceError {
        NodeSourceError::NoOrdinal {
            hostname: hostname.to_owned(),
            max,
        }
    }

    #[test]
    fn parse_node_accepts_0_to_max_node() {
        let twitter = &Layout::TWITTER;
        assert_eq!(parse_node("N", "0", twitter), Ok(0));
        assert_eq!(parse_node("N", "1023", twitter), Ok(1023));
        assert_eq!(parse_node("N", "15", &four_bit()), Ok(15));
        assert_eq!(parse_node("N", "0", &four_bit()), Ok(0));
        assert_eq!(parse_node("N", "0", &Layout::MASTODON), Ok(0));
        assert_eq!(parse_node("N", " \t7\r\n", twitter), Ok(7));
        assert_eq!(parse_node("N", "007", twitter), Ok(7));
    }

    #[test]
    fn parse_node_rejects_what_is_not_a_decimal_number() {
        for value in [
            "", " \n", "abc", "+7", "-7", "0x10", "1 2", "7a", "7.0", "1_000", "\u{0667}", "\u{a0}7",
        ] {
            assert_eq!(
                parse_node("ATOMFLAKE_NODE", value, &Layout::TWITTER),
                Err(not_a_number("ATOMFLAKE_NODE", value, 1023)),
                "{value:?}"
            );
        }
        assert_eq!(
            parse_node("ATOMFLAKE_NODE", "abc", &Layout::TWITTER)
                .unwrap_err()
                .to_string(),
            "\"abc\" from ATOMFLAKE_NODE is not a node id: expected a decimal number in 0..=1023"
        );
    }

    #[test]
    fn parse_node_rejects_numbers_above_u64_without_wrapping() {
        let value = " 18446744073709551616\n";
        refused(
            parse_node("N", value, &Layout::TWITTER),
            &not_a_number("N", value, 1023),
            "\" 18446744073709551616\\n\" from N is not a node id: expected a decimal number in 0..=1023",
        );
        assert_eq!(
            parse_node("N", "18446744073709551615", &Layout::TWITTER),
            Err(out_of_range("N", u64::MAX, 1023))
        );
    }

    #[test]
    fn parse_node_rejects_nodes_above_max_node() {
        refused(
            parse_node("ATOMFLAKE_NODE", "1024", &Layout::TWITTER),
            &out_of_range("ATOMFLAKE_NODE", 1024, 1023),
            "node 1024 from ATOMFLAKE_NODE is out of range: the layout allows 0..=1023",
        );
        assert_eq!(parse_node("N", "16", &four_bit()), Err(out_of_range("N", 16, 15)));
        assert_eq!(
            parse_node("N", "1", &Layout::MASTODON),
            Err(out_of_range("N", 1, 0))
        );
    }

    #[test]
    fn from_env_reports_an_unset_variable() {
        let var = "ATOMFLAKE_TEST_NODE_SURELY_UNSET_3F9C1A7E";
        let err = refused(
            from_env(var, &Layout::TWITTER),
            &NodeSourceError::Missing {
                var: var.to_owned(),
                max: 1023,
            },
            "environment variable ATOMFLAKE_TEST_NODE_SURELY_UNSET_3F9C1A7E is not set: it should \
             hold this process's node id, a decimal number in 0..=1023",
        );
        assert!(err.source().is_none());
    }

    #[test]
    fn from_var_parses_a_set_value() {
        let value = Some(OsString::from("12\n"));
        assert_eq!(from_var("ATOMFLAKE_NODE", value, &Layout::TWITTER), Ok(12));
        let value = Some(OsString::from("16"));
        assert_eq!(
            from_var("ATOMFLAKE_NODE", value, &four_bit()),
            Err(out_of_range("ATOMFLAKE_NODE", 16, 15))
        );
    }

    #[cfg(unix)]
    #[test]
    fn from_var_reports_a_value_that_is_not_unicode() {
        use std::os::unix::ffi::OsStringExt;

        let value = Some(OsString::from_vec(b"1\xff".to_vec()));
        refused(
            from_var("ATOMFLAKE_NODE", value, &four_bit()),
            &NodeSourceError::NotUnicode {
                var: "ATOMFLAKE_NODE".to_owned(),
                max: 15,
            },
            "environment variable ATOMFLAKE_NODE is not valid unicode: expected a decimal node id in 0..=15",
        );
    }

    #[test]
    fn ordinals_from_0_to_max_node_are_nodes() {
        let twitter = &Layout::TWITTER;
        assert_eq!(from_statefulset_ordinal("orders-7", twitter), Ok(7));
        assert_eq!(from_statefulset_ordinal("web-api-12", twitter), Ok(12));
        assert_eq!(from_statefulset_ordinal("orders-0", twitter), Ok(0));
        assert_eq!(from_statefulset_ordinal("orders-1023", twitter), Ok(1023));
        assert_eq!(from_statefulset_ordinal("db-0", &four_bit()), Ok(0));
        assert_eq!(from_statefulset_ordinal("db-15", &four_bit()), Ok(15));
        assert_eq!(from_statefulset_ordinal("a-0", &Layout::MASTODON), Ok(0));
    }

    #[test]
    fn hostnames_without_an_ordinal_are_errors() {
        for hostname in [
            "",
            "orders",
            "orders-",
            "-7",
            "web-api",
            "orders-07",
            "orders-00",
            "orders-7a",
            "orders-+7",
            "orders-7 ",
            " orders-7\n",
            "orders-0x1",
            "orders_7",
            "orders-\u{0667}",
        ] {
            assert_eq!(
                from_statefulset_ordinal(hostname, &Layout::TWITTER),
                Err(no_ordinal(hostname, 1023)),
                "{hostname:?}"
            );
        }
        assert_eq!(
            from_statefulset_ordinal("orders", &four_bit())
                .unwrap_err()
                .to_string(),
            "hostname \"orders\" has no statefulset ordinal: expected <name>-<N> with N in 0..=15, \
             written without leading zeros"
        );
    }

    #[test]
    fn ordinals_above_max_node_are_out_of_range() {
        refused(
            from_statefulset_ordinal("orders-1024", &Layout::TWITTER),
            &out_of_range("hostname \"orders-1024\"", 1024, 1023),
            "node 1024 from hostname \"orders-1024\" is out of range: the layout allows 0..=1023",
        );
        assert_eq!(
            from_statefulset_ordinal("db-16", &four_bit()),
            Err(out_of_range("hostname \"db-16\"", 16, 15))
        );
    }

    #[test]
    fn ordinals_above_u64_are_not_numbers() {
        let hostname = "orders-18446744073709551616";
        refused(
            from_statefulset_ordinal(hostname, &Layout::TWITTER),
            &not_a_number(
                "hostname \"orders-18446744073709551616\"",
                "18446744073709551616",
                1023,
            ),
            "\"18446744073709551616\" from hostname \"orders-18446744073709551616\" is not a node id: \
             expected a decimal number in 0..=1023",
        );
    }

    #[test]
    fn the_hostname_is_hostname_trimmed_before_the_file() {
        let missing = Path::new("/nonexistent/atomflake/hostname");
        let env = OsString::from(" web-api-12\n");
        assert_eq!(read_hostname(Some(&env), missing), Ok("web-api-12".to_owned()));
    }

    #[test]
    fn an_unset_or_empty_hostname_reads_the_file() {
        let file = env::temp_dir().join(format!("atomflake-node-hostname-{}", std::process::id()));
        fs::write(&file, "orders-3\n").unwrap();
        let empty = OsString::from(" \n");
        let read = (read_hostname(None, &file), read_hostname(Some(&empty), &file));
        fs::remove_file(&file).unwrap();
        assert_eq!(read, (Ok("orders-3".to_owned()), Ok("orders-3".to_owned())));
    }

    #[test]
    fn no_hostname_is_an_error_with_its_cause() {
        let missing = Path::new("/nonexistent/atomflake/hostname");
        let err = read_hostname(Some(OsStr::new("")), missing).unwrap_err();
        let NodeSourceError::Hostname { cause } = &err else {
            panic!("{err:?}");
        };
        assert_eq!(cause.kind(), io::ErrorKind::NotFound);
        assert_eq!(
            err.to_string(),
            format!(
                "could not find the hostname: HOSTNAME is unset or empty and /etc/hostname could not \
                 be read: {}",
                cause.get()
            )
        );
        assert_eq!(err.source().unwrap().to_string(), cause.get().to_string());
        let any = Error::from(err.clone());
        assert_eq!(any, Error::Node(err.clone()));
        assert_eq!(any.to_string(), err.to_string());
        assert!(any.source().is_some());
    }

    #[cfg(unix)]
    #[test]
    fn a_hostname_that_is_not_unicode_keeps_its_ordinal() {
        use std::os::unix::ffi::OsStrExt;

        let env = OsStr::from_bytes(b"\xff-3");
        let hostname = read_hostname(Some(env), Path::new("/nonexistent")).unwrap();
        assert_eq!(hostname, "\u{fffd}-3");
        assert_eq!(from_statefulset_ordinal(&hostname, &Layout::TWITTER), Ok(3));
    }
}
