//! The members of an etcd cluster, as `etcd://HOST:PORT[,HOST:PORT...]` names them.

use core::fmt;
use std::str::FromStr;

/// The port of a member whose URL names none: etcd's client port.
const DEFAULT_PORT: u16 = 2379;

/// The client addresses of an etcd cluster's members: `etcd://HOST[:PORT][,HOST[:PORT]...]`,
/// each host a name, an IPv4 address or a bracketed IPv6 address, each port 2379 unless
/// given. A lease talks to whichever member answers.
///
/// # Examples
///
/// ```
/// use atomflake_etcd::Endpoints;
///
/// let cluster: Endpoints = "etcd://10.0.0.1:2379,10.0.0.2,[fd00::3]:2381".parse()?;
/// assert_eq!(cluster.len(), 3);
/// assert_eq!(cluster.to_string(), "etcd://10.0.0.1:2379,10.0.0.2:2379,[fd00::3]:2381");
/// assert_eq!(
///     "etcd://db:70000".parse::<Endpoints>().unwrap_err().to_string(),
///     "invalid etcd URL: member 1's port \"70000\" is not a port number: allowed 1..=65535",
/// );
/// # Ok::<(), atomflake_etcd::EndpointsError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoints {
    members: Vec<(String, u16)>,
}

impl Endpoints {
    /// How many members are named.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Always false: a URL names at least one member.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Each member's host and port, in the order given.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &u16)> {
        self.members.iter().map(|(host, port)| (host.as_str(), port))
    }
}

/// `host:port`, with an IPv6 host in brackets.
pub(crate) fn join(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

impl fmt::Display for Endpoints {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("etcd://")?;
        for (i, (host, port)) in self.members.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            f.write_str(&join(host, *port))?;
        }
        Ok(())
    }
}

/// Why a string is not an etcd URL. A message quotes a host or a port, never the whole
/// string, which could hold credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EndpointsError {
    /// It does not start with `etcd://`.
    Scheme,
    /// It has a user or a password (an `@`), a path, a query or a fragment: etcd URLs here
    /// name members only.
    NotMembersOnly {
        /// The character found.
        found: char,
    },
    /// A member's host is empty or has characters no host name or address has.
    Host {
        /// The member, counted from 1.
        member: usize,
    },
    /// A member's port is not a number in `1..=65535`.
    Port {
        /// The member, counted from 1.
        member: usize,
        /// What stood where the port goes.
        port: String,
    },
}

impl fmt::Display for EndpointsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("invalid etcd URL: ")?;
        match self {
            EndpointsError::Scheme => {
                f.write_str("it must start with etcd://, then HOST:PORT[,HOST:PORT...]")
            }
            EndpointsError::NotMembersOnly { found } => write!(
                f,
                "found {found:?}: the URL names members only, etcd://HOST:PORT[,HOST:PORT...] \
                 (no user, password, path or query)"
            ),
            EndpointsError::Host { member } => write!(
                f,
                "member {member}'s host is empty or not a host name, an IPv4 address or a bracketed IPv6 address"
            ),
            EndpointsError::Port { member, port } => write!(
                f,
                "member {member}'s port {port:?} is not a port number: allowed 1..=65535"
            ),
        }
    }
}

impl std::error::Error for EndpointsError {}

impl FromStr for Endpoints {
    type Err = EndpointsError;

    fn from_str(url: &str) -> Result<Endpoints, EndpointsError> {
        let rest = url.strip_prefix("etcd://").ok_or(EndpointsError::Scheme)?;
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if let Some(found) = rest.chars().find(|c| matches!(c, '@' | '/' | '?' | '#')) {
            return Err(EndpointsError::NotMembersOnly { found });
        }
        let members = rest
            .split(',')
            .enumerate()
            .map(|(i, member)| parse_member(i + 1, member))
            .collect::<Result<_, _>>()?;
        Ok(Endpoints { members })
    }
}

fn parse_member(member: usize, text: &str) -> Result<(String, u16), EndpointsError> {
    let (host, port) = if let Some(bracketed) = text.strip_prefix('[') {
        let (host, after) = bracketed.split_once(']').ok_or(EndpointsError::Host { member })?;
        if host.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(EndpointsError::Host { member });
        }
        match after {
            "" => (host, None),
            _ => (
                host,
                Some(after.strip_prefix(':').ok_or(EndpointsError::Host { member })?),
            ),
        }
    } else {
        match text.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        }
    };
    let is_host_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | ':');
    if host.is_empty() || !host.chars().all(is_host_char) {
        return Err(EndpointsError::Host { member });
    }
    let port = match port {
        None => DEFAULT_PORT,
        Some(port) => port
            .parse()
            .ok()
            .filter(|&port| port != 0)
            .ok_or_else(|| EndpointsError::Port {
                member,
                port: port.to_owned(),
            })?,
    };
    Ok((host.to_owned(), port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(url: &str) -> EndpointsError {
        url.parse::<Endpoints>().unwrap_err()
    }

    #[test]
    fn members_parse_with_their_ports_or_etcds() {
        let cluster: Endpoints = "etcd://a:1,b.example:65535,127.0.0.1,[::1]:2380/"
            .parse()
            .unwrap();
        let members: Vec<(&str, u16)> = cluster.iter().map(|(host, port)| (host, *port)).collect();
        assert_eq!(
            members,
            [("a", 1), ("b.example", 65535), ("127.0.0.1", 2379), ("::1", 2380)]
        );
        assert_eq!(
            cluster.to_string(),
            "etcd://a:1,b.example:65535,127.0.0.1:2379,[::1]:2380"
        );
        assert_eq!(cluster.to_string().parse::<Endpoints>().unwrap(), cluster);
    }

    #[test]
    fn every_bad_url_is_an_exact_error() {
        assert_eq!(error("postgres://a:b@h/db"), EndpointsError::Scheme);
        assert_eq!(
            error("etcd://user:secret@h:1"),
            EndpointsError::NotMembersOnly { found: '@' }
        );
        assert_eq!(
            error("etcd://h:1/v3"),
            EndpointsError::NotMembersOnly { found: '/' }
        );
        assert_eq!(
            error("etcd://h:1?x=1"),
            EndpointsError::NotMembersOnly { found: '?' }
        );
        assert_eq!(error("etcd://"), EndpointsError::Host { member: 1 });
        assert_eq!(error("etcd://h:1,,g"), EndpointsError::Host { member: 2 });
        assert_eq!(error("etcd://h:1,g h:2"), EndpointsError::Host { member: 2 });
        assert_eq!(error("etcd://[::1"), EndpointsError::Host { member: 1 });
        assert_eq!(error("etcd://[nope]:1"), EndpointsError::Host { member: 1 });
        assert_eq!(error("etcd://[::1]x"), EndpointsError::Host { member: 1 });
        for port in ["0", "65536", "", "-1", "2379x"] {
            assert_eq!(
                error(&format!("etcd://h:{port}")),
                EndpointsError::Port {
                    member: 1,
                    port: port.to_owned()
                }
            );
        }
    }

    #[test]
    fn a_url_with_credentials_is_refused_without_showing_them() {
        let text = error("etcd://root:hunter2@h:2379").to_string();
        assert!(!text.contains("hunter2") && !text.contains("root"), "{text}");
        assert_eq!(
            text,
            "invalid etcd URL: found '@': the URL names members only, etcd://HOST:PORT[,HOST:PORT...] \
             (no user, password, path or query)"
        );
    }
}
