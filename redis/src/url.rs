//! [`RedisUrl`]: where a lease's Redis is, `redis://[USER:PASSWORD@]HOST:PORT[/DB]` or
//! `rediss://…?cacert=PATH&cert=PATH&key=PATH`, with `?replicas=N`.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// The most replicas a write may wait for (`?replicas=N`).
pub const MAX_REPLICAS: u32 = 16;

/// A Redis server for leases: its address, user, password and database, TLS, and how many
/// replicas must acknowledge each write. Its `Debug` and errors never show the password.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisUrl {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) user: Option<String>,
    pub(crate) password: Option<String>,
    pub(crate) db: i64,
    pub(crate) tls: Option<TlsFiles>,
    /// Replicas that must acknowledge each write (`WAIT`), 0 for none.
    pub(crate) replicas: u32,
}

/// The PEM files of TLS to Redis.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct TlsFiles {
    /// The CA that signed the server's certificate; the system's roots when `None`.
    pub(crate) ca: Option<PathBuf>,
    /// A client certificate and its key.
    pub(crate) client: Option<(PathBuf, PathBuf)>,
}

/// A Redis URL that is not one: what is wrong, never the URL itself (it can hold a
/// password).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the Redis URL {0}")]
pub struct RedisUrlError(String);

impl RedisUrl {
    /// The host and port, as messages name the server.
    pub fn address(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    /// How many replicas each write waits for.
    pub fn replicas(&self) -> u32 {
        self.replicas
    }

    /// The URL the `redis` crate connects with (its own form: no query).
    pub(crate) fn client_url(&self) -> String {
        let scheme = if self.tls.is_some() { "rediss" } else { "redis" };
        let encode = |text: &str| url::form_urlencoded::byte_serialize(text.as_bytes()).collect::<String>();
        let auth = match (&self.user, &self.password) {
            (Some(user), Some(password)) => format!("{}:{}@", encode(user), encode(password)),
            (Some(user), None) => format!("{}@", encode(user)),
            (None, Some(password)) => format!(":{}@", encode(password)),
            (None, None) => String::new(),
        };
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        format!("{scheme}://{auth}{host}:{}/{}", self.port, self.db)
    }
}

impl fmt::Debug for RedisUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisUrl")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("db", &self.db)
            .field("tls", &self.tls)
            .field("replicas", &self.replicas)
            .finish()
    }
}

impl FromStr for RedisUrl {
    type Err = RedisUrlError;

    fn from_str(text: &str) -> Result<RedisUrl, RedisUrlError> {
        let bad = |why: &str| RedisUrlError(why.to_owned());
        let url = url::Url::parse(text).map_err(|error| RedisUrlError(format!("cannot be read: {error}")))?;
        let tls = match url.scheme() {
            "redis" => false,
            "rediss" => true,
            other => {
                return Err(RedisUrlError(format!(
                    "has the scheme {other:?}: allowed redis, rediss"
                )));
            }
        };
        let host = match url.host() {
            Some(url::Host::Domain(name)) if !name.is_empty() => name.to_owned(),
            Some(url::Host::Ipv4(address)) => address.to_string(),
            Some(url::Host::Ipv6(address)) => address.to_string(),
            _ => return Err(bad("has no host")),
        };
        let port = url.port().unwrap_or(6379);
        let decode = |text: &str| {
            percent_encoding::percent_decode_str(text)
                .decode_utf8()
                .map(std::borrow::Cow::into_owned)
                .map_err(|_| bad("has a user or password that is not UTF-8"))
        };
        let user = match url.username() {
            "" => None,
            user => Some(decode(user)?),
        };
        let password = url.password().map(decode).transpose()?;
        let db = match url.path().trim_start_matches('/') {
            "" => 0,
            db => db
                .parse::<i64>()
                .ok()
                .filter(|db| (0..=i64::from(u16::MAX)).contains(db))
                .ok_or_else(|| RedisUrlError(format!("names the database {db:?}: allowed 0 to 65535")))?,
        };
        let mut files = TlsFiles::default();
        let (mut cert, mut key) = (None, None);
        let mut replicas = 0;
        for (name, value) in url.query_pairs() {
            match &*name {
                "replicas" => {
                    replicas = value
                        .parse()
                        .ok()
                        .filter(|count| *count <= MAX_REPLICAS)
                        .ok_or_else(|| {
                            RedisUrlError(format!("asks for replicas={value}: allowed 0 to {MAX_REPLICAS}"))
                        })?;
                }
                "cacert" if tls => files.ca = Some(PathBuf::from(&*value)),
                "cert" if tls => cert = Some(PathBuf::from(&*value)),
                "key" if tls => key = Some(PathBuf::from(&*value)),
                "cacert" | "cert" | "key" => {
                    return Err(RedisUrlError(format!("sets {name} without TLS: use rediss://")));
                }
                other => {
                    return Err(RedisUrlError(format!(
                        "has the parameter {other:?}: allowed replicas, and with rediss:// cacert, cert, key"
                    )));
                }
            }
        }
        files.client = match (cert, key) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            _ => return Err(bad("sets one of cert and key: give both, or neither")),
        };
        Ok(RedisUrl {
            host,
            port,
            user,
            password,
            db,
            tls: tls.then_some(files),
            replicas,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(text: &str) -> String {
        text.parse::<RedisUrl>().unwrap_err().to_string()
    }

    #[test]
    fn urls_are_read_and_the_password_never_shown() {
        let url: RedisUrl = "redis://ids:s%40cret@10.0.0.1:6380/2?replicas=1".parse().unwrap();
        assert_eq!(url.address(), "10.0.0.1:6380");
        assert_eq!(
            (url.user.as_deref(), url.password.as_deref(), url.db),
            (Some("ids"), Some("s@cret"), 2)
        );
        assert_eq!(url.replicas(), 1);
        assert!(!format!("{url:?}").contains("cret"), "{url:?}");
        assert_eq!(url.client_url(), "redis://ids:s%40cret@10.0.0.1:6380/2");
        let tls: RedisUrl = "rediss://cache.internal?cacert=/ca.pem&cert=/c.pem&key=/k.pem"
            .parse()
            .unwrap();
        assert_eq!(tls.port, 6379);
        let files = tls.tls.as_ref().unwrap();
        assert_eq!(files.ca.as_deref(), Some(std::path::Path::new("/ca.pem")));
        assert_eq!(tls.client_url(), "rediss://cache.internal:6379/0");
    }

    #[test]
    fn each_bad_url_is_refused_without_showing_it() {
        assert_eq!(
            refused("redis://:pw@host/99999"),
            "the Redis URL names the database \"99999\": allowed 0 to 65535"
        );
        assert_eq!(
            refused("http://host"),
            "the Redis URL has the scheme \"http\": allowed redis, rediss"
        );
        assert_eq!(
            refused("redis://:pw@host?replicas=17"),
            "the Redis URL asks for replicas=17: allowed 0 to 16"
        );
        assert_eq!(
            refused("redis://:pw@host?cacert=/ca.pem"),
            "the Redis URL sets cacert without TLS: use rediss://"
        );
        assert_eq!(
            refused("rediss://:pw@host?cert=/c.pem"),
            "the Redis URL sets one of cert and key: give both, or neither"
        );
        assert_eq!(
            refused("redis://:pw@host?timeout=1"),
            "the Redis URL has the parameter \"timeout\": allowed replicas, and with rediss:// cacert, cert, key"
        );
        assert!(!refused("redis://:secretpw@host/x").contains("secretpw"));
    }
}
