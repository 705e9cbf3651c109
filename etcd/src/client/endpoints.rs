//! The members of an etcd cluster, as `etcd://HOST:PORT[,HOST:PORT...]` names them, or
//! `etcds://[USER:PASSWORD@]HOST:PORT[,...][?cacert=PATH&cert=PATH&key=PATH]` over TLS.

use core::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// The port of a member whose URL names none: etcd's client port.
const DEFAULT_PORT: u16 = 2379;

/// How to reach an etcd cluster: its members' client addresses and, for `etcds://`, TLS and
/// the user to log in as.
///
/// - `etcd://HOST[:PORT][,HOST[:PORT]...]`: plain gRPC, no user.
/// - `etcds://[USER:PASSWORD@]HOST[:PORT][,...][?cacert=PATH&cert=PATH&key=PATH]`: TLS,
///   each member verified by its host name (or IP address) against `cacert`, else the
///   system's roots; `cert` and `key` (both or neither) are the client certificate for
///   etcd's `--client-cert-auth`. `USER:PASSWORD` logs in with etcd's authentication; the
///   token it gives is taken again when etcd no longer accepts it. The user, the password
///   and the paths are percent-decoded (`%40` for `@`).
///
/// Each host is a name, an IPv4 address or a bracketed IPv6 address, each port 2379 unless
/// given. A lease talks to whichever member answers. Neither [`Display`](fmt::Display) nor
/// [`Debug`] nor an error shows the password.
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
///
/// let secure: Endpoints = "etcds://app:s%40cret@etcd-0.etcd:2379?cacert=/etc/etcd/ca.pem".parse()?;
/// assert!(secure.is_tls());
/// assert_eq!(secure.user(), Some("app"));
/// assert_eq!(secure.to_string(), "etcds://app@etcd-0.etcd:2379?cacert=/etc/etcd/ca.pem");
/// # Ok::<(), atomflake_etcd::EndpointsError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoints {
    members: Vec<(String, u16)>,
    tls: Option<Tls>,
    user: Option<User>,
}

/// The TLS files of an `etcds://` URL.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Tls {
    /// The CA that signs the members' certificates; the system's roots when `None`.
    pub(crate) ca: Option<PathBuf>,
    /// The client certificate and its key.
    pub(crate) identity: Option<(PathBuf, PathBuf)>,
}

/// A user of etcd's authentication, with its password.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct User {
    pub(crate) name: String,
    pub(crate) password: String,
}

impl fmt::Debug for User {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("User")
            .field("name", &self.name)
            .field("password", &"<hidden>")
            .finish()
    }
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

    /// Whether the members are reached over TLS (`etcds://`).
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// The user that logs in with a password, if the URL names one.
    pub fn user(&self) -> Option<&str> {
        self.user.as_ref().map(|user| user.name.as_str())
    }

    pub(crate) fn tls(&self) -> Option<&Tls> {
        self.tls.as_ref()
    }

    pub(crate) fn credentials(&self) -> Option<&User> {
        self.user.as_ref()
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
        f.write_str(if self.tls.is_some() { "etcds://" } else { "etcd://" })?;
        if let Some(user) = &self.user {
            write!(f, "{}@", user.name)?;
        }
        for (i, (host, port)) in self.members.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            f.write_str(&join(host, *port))?;
        }
        if let Some(tls) = &self.tls {
            let mut parameters = Vec::new();
            if let Some(ca) = &tls.ca {
                parameters.push(format!("cacert={}", ca.display()));
            }
            if let Some((cert, key)) = &tls.identity {
                parameters.push(format!("cert={}", cert.display()));
                parameters.push(format!("key={}", key.display()));
            }
            if !parameters.is_empty() {
                write!(f, "?{}", parameters.join("&"))?;
            }
        }
        Ok(())
    }
}

/// Why a string is not an etcd URL. A message quotes a host, a port or a parameter's name,
/// never the whole string, which could hold credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EndpointsError {
    /// It starts with neither `etcd://` nor `etcds://`.
    Scheme,
    /// An `etcd://` URL with a user or a password (an `@`), a path, a query or a fragment;
    /// or an `etcds://` URL with a path or a fragment.
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
    /// The part before the `@` is not `USER:PASSWORD`, both not empty and percent-encoded
    /// where needed.
    Credentials,
    /// A query parameter that is not `cacert`, `cert` or `key`, given twice, or empty.
    Parameter {
        /// The parameter's name as written.
        name: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// `cert` without `key`, or `key` without `cert`.
    CertWithoutKey,
}

impl fmt::Display for EndpointsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("invalid etcd URL: ")?;
        match self {
            EndpointsError::Scheme => f.write_str(
                "it must start with etcd://, then HOST:PORT[,HOST:PORT...], or with etcds:// for TLS",
            ),
            EndpointsError::NotMembersOnly { found } => write!(
                f,
                "found {found:?}: an etcd:// URL names members only, etcd://HOST:PORT[,HOST:PORT...]; a user, \
                 a password and TLS files go in an etcds:// URL, \
                 etcds://[USER:PASSWORD@]HOST:PORT[,...][?cacert=PATH&cert=PATH&key=PATH] (no path or fragment)"
            ),
            EndpointsError::Host { member } => write!(
                f,
                "member {member}'s host is empty or not a host name, an IPv4 address or a bracketed IPv6 address"
            ),
            EndpointsError::Port { member, port } => write!(
                f,
                "member {member}'s port {port:?} is not a port number: allowed 1..=65535"
            ),
            EndpointsError::Credentials => f.write_str(
                "the part before '@' must be USER:PASSWORD, neither empty, percent-encoded where needed",
            ),
            EndpointsError::Parameter { name, problem } => write!(
                f,
                "parameter {name:?} {problem}: allowed cacert, cert and key, each once with a path"
            ),
            EndpointsError::CertWithoutKey => {
                f.write_str("cert and key go together: give both (a client certificate) or neither")
            }
        }
    }
}

impl std::error::Error for EndpointsError {}

impl FromStr for Endpoints {
    type Err = EndpointsError;

    fn from_str(url: &str) -> Result<Endpoints, EndpointsError> {
        let (secure, rest) = if let Some(rest) = url.strip_prefix("etcds://") {
            (true, rest)
        } else {
            (false, url.strip_prefix("etcd://").ok_or(EndpointsError::Scheme)?)
        };
        let (rest, query) = match rest.split_once('?') {
            Some((rest, query)) if secure => (rest, Some(query)),
            _ => (rest, None),
        };
        let (user, rest) = match rest.rsplit_once('@') {
            Some((userinfo, rest)) if secure => (Some(parse_user(userinfo)?), rest),
            _ => (None, rest),
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if let Some(found) = rest.chars().find(|c| matches!(c, '@' | '/' | '?' | '#')) {
            return Err(EndpointsError::NotMembersOnly { found });
        }
        let members = rest
            .split(',')
            .enumerate()
            .map(|(i, member)| parse_member(i + 1, member))
            .collect::<Result<_, _>>()?;
        let tls = if secure {
            Some(parse_tls(query.unwrap_or_default())?)
        } else {
            None
        };
        Ok(Endpoints { members, tls, user })
    }
}

fn parse_user(userinfo: &str) -> Result<User, EndpointsError> {
    let (name, password) = userinfo.split_once(':').ok_or(EndpointsError::Credentials)?;
    let (name, password) = (
        percent_decode(name).ok_or(EndpointsError::Credentials)?,
        percent_decode(password).ok_or(EndpointsError::Credentials)?,
    );
    if name.is_empty() || password.is_empty() {
        return Err(EndpointsError::Credentials);
    }
    Ok(User { name, password })
}

fn parse_tls(query: &str) -> Result<Tls, EndpointsError> {
    let (mut ca, mut cert, mut key) = (None, None, None);
    for parameter in query.split('&').filter(|parameter| !parameter.is_empty()) {
        if let Some(found) = parameter.chars().find(|&c| c == '#') {
            return Err(EndpointsError::NotMembersOnly { found });
        }
        let (name, value) = parameter.split_once('=').unwrap_or((parameter, ""));
        let problem = |problem| EndpointsError::Parameter {
            name: name.to_owned(),
            problem,
        };
        let slot = match name {
            "cacert" => &mut ca,
            "cert" => &mut cert,
            "key" => &mut key,
            _ => return Err(problem("is unknown")),
        };
        if slot.is_some() {
            return Err(problem("is given twice"));
        }
        let path = percent_decode(value).ok_or_else(|| problem("is not percent-encoded"))?;
        if path.is_empty() {
            return Err(problem("has no path"));
        }
        *slot = Some(PathBuf::from(path));
    }
    let identity = match (cert, key) {
        (Some(cert), Some(key)) => Some((cert, key)),
        (None, None) => None,
        _ => return Err(EndpointsError::CertWithoutKey),
    };
    Ok(Tls { ca, identity })
}

/// `text` with each `%XX` replaced by its byte; `None` for a `%` not followed by two hex
/// digits, or bytes that are not UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    let mut bytes = Vec::with_capacity(text.len());
    let mut rest = text.as_bytes();
    while let Some((&byte, after)) = rest.split_first() {
        if byte == b'%' {
            let hex = after
                .get(..2)
                .filter(|hex| hex.iter().all(u8::is_ascii_hexdigit))?;
            bytes.push(u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?);
            rest = &after[2..];
        } else {
            bytes.push(byte);
            rest = after;
        }
    }
    String::from_utf8(bytes).ok()
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
        let host = |member| EndpointsError::Host { member };
        let found = |found| EndpointsError::NotMembersOnly { found };
        for (url, expected) in [
            ("postgres://a:b@h/db", EndpointsError::Scheme),
            ("etcd://user:secret@h:1", found('@')),
            ("etcd://h:1/v3", found('/')),
            ("etcd://h:1?x=1", found('?')),
            ("etcd://", host(1)),
            ("etcd://h:1,,g", host(2)),
            ("etcd://h:1,g h:2", host(2)),
            ("etcd://[::1", host(1)),
            ("etcd://[nope]:1", host(1)),
            ("etcd://[::1]x", host(1)),
        ] {
            assert_eq!(error(url), expected, "{url}");
        }
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
            "invalid etcd URL: found '@': an etcd:// URL names members only, etcd://HOST:PORT[,HOST:PORT...]; \
             a user, a password and TLS files go in an etcds:// URL, \
             etcds://[USER:PASSWORD@]HOST:PORT[,...][?cacert=PATH&cert=PATH&key=PATH] (no path or fragment)"
        );
    }

    #[test]
    fn an_etcds_url_has_tls_a_user_and_files() {
        let url = "etcds://app:p%40ss:w%3Ard@a:1,[::1]?cacert=/ca%20dir/ca.pem&cert=c.crt&key=c.key";
        let cluster: Endpoints = url.parse().unwrap();
        assert!(cluster.is_tls());
        assert_eq!(cluster.user(), Some("app"));
        assert_eq!(cluster.credentials().unwrap().password, "p@ss:w:rd");
        let tls = cluster.tls().unwrap();
        assert_eq!(tls.ca, Some(PathBuf::from("/ca dir/ca.pem")));
        assert_eq!(
            tls.identity,
            Some((PathBuf::from("c.crt"), PathBuf::from("c.key")))
        );
        assert_eq!(
            cluster.to_string(),
            "etcds://app@a:1,[::1]:2379?cacert=/ca dir/ca.pem&cert=c.crt&key=c.key"
        );
        let debug = format!("{cluster:?}");
        assert!(debug.contains("app") && !debug.contains("p@ss"), "{debug}");

        let bare: Endpoints = "etcds://h".parse().unwrap();
        assert_eq!(bare.tls(), Some(&Tls::default()));
        assert_eq!(bare.user(), None);
        assert_eq!(bare.to_string(), "etcds://h:2379");
        assert!(!"etcd://h".parse::<Endpoints>().unwrap().is_tls());
    }

    #[test]
    fn every_bad_etcds_url_is_an_exact_error_without_the_password() {
        for userinfo in ["app", "app:", ":pw", "app:pw%4", "app:pw%zz", "app:%ff"] {
            let url = format!("etcds://{userinfo}@h:1");
            assert_eq!(error(&url), EndpointsError::Credentials, "{url}");
        }
        let parameter = |name: &str, problem| EndpointsError::Parameter {
            name: name.to_owned(),
            problem,
        };
        for (url, expected) in [
            ("etcds://h?ca=x", parameter("ca", "is unknown")),
            (
                "etcds://h?cacert=a&cacert=b",
                parameter("cacert", "is given twice"),
            ),
            ("etcds://h?cacert=", parameter("cacert", "has no path")),
            ("etcds://h?key", parameter("key", "has no path")),
            ("etcds://h?cert=a%g", parameter("cert", "is not percent-encoded")),
            ("etcds://h?cert=c", EndpointsError::CertWithoutKey),
            ("etcds://h?key=k", EndpointsError::CertWithoutKey),
            ("etcds://h/v3", EndpointsError::NotMembersOnly { found: '/' }),
            (
                "etcds://h?cacert=a#b",
                EndpointsError::NotMembersOnly { found: '#' },
            ),
            ("etcds://a:b@", EndpointsError::Host { member: 1 }),
        ] {
            assert_eq!(error(url), expected, "{url}");
        }
        for (url, message) in [
            (
                "etcds://u:hunter2@h:0",
                "invalid etcd URL: member 1's port \"0\" is not a port number: allowed 1..=65535",
            ),
            (
                "etcds://u:hunter2@h?x=1",
                "invalid etcd URL: parameter \"x\" is unknown: allowed cacert, cert and key, each once with a path",
            ),
            (
                "etcds://u@h",
                "invalid etcd URL: the part before '@' must be USER:PASSWORD, neither empty, \
                 percent-encoded where needed",
            ),
            (
                "etcds://h?cert=c",
                "invalid etcd URL: cert and key go together: give both (a client certificate) or neither",
            ),
            (
                "https://h",
                "invalid etcd URL: it must start with etcd://, then HOST:PORT[,HOST:PORT...], or with etcds:// for TLS",
            ),
        ] {
            assert_eq!(error(url).to_string(), message, "{url}");
        }
    }
}
