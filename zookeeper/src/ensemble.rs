//! Where the ensemble is: `zk://HOST:PORT[,HOST:PORT...][/CHROOT]`.

use core::fmt;
use std::str::FromStr;

/// The servers of a ZooKeeper ensemble, and the chroot every path of the lease is under.
///
/// # Examples
///
/// ```
/// use atomflake_zookeeper::Ensemble;
///
/// let ensemble: Ensemble = "zk://10.0.0.1:2181,10.0.0.2:2181/apps/orders".parse()?;
/// assert_eq!(ensemble.connect_string(), "10.0.0.1:2181,10.0.0.2:2181/apps/orders");
/// assert_eq!(ensemble.to_string(), "zk://10.0.0.1:2181,10.0.0.2:2181/apps/orders");
/// # Ok::<(), atomflake_zookeeper::EnsembleError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ensemble {
    servers: Vec<(String, u16)>,
    chroot: String,
}

/// Why a `zk://` URL was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EnsembleError {
    /// The URL does not start with `zk://`.
    Scheme {
        /// The URL given.
        url: String,
    },
    /// A server is not `HOST:PORT`.
    Server {
        /// Which server, from 1.
        index: usize,
        /// What was given.
        server: String,
    },
    /// A port is not in `1..=65535`.
    Port {
        /// Which server, from 1.
        index: usize,
        /// What was given.
        port: String,
    },
    /// The chroot is not an absolute path of non-empty parts (`/a/b`).
    Chroot {
        /// What was given.
        chroot: String,
    },
}

impl fmt::Display for EnsembleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EnsembleError::Scheme { url } => write!(
                f,
                "invalid ZooKeeper URL {url:?}: allowed zk://HOST:PORT[,HOST:PORT...][/CHROOT]"
            ),
            EnsembleError::Server { index, server } => write!(
                f,
                "invalid ZooKeeper URL: server {index} {server:?} is not HOST:PORT"
            ),
            EnsembleError::Port { index, port } => write!(
                f,
                "invalid ZooKeeper URL: server {index}'s port {port:?} is not a port number: allowed 1..=65535"
            ),
            EnsembleError::Chroot { chroot } => write!(
                f,
                "invalid ZooKeeper URL: chroot {chroot:?} is not an absolute path of non-empty parts"
            ),
        }
    }
}

impl std::error::Error for EnsembleError {}

impl FromStr for Ensemble {
    type Err = EnsembleError;

    fn from_str(url: &str) -> Result<Ensemble, EnsembleError> {
        let rest = url
            .strip_prefix("zk://")
            .ok_or_else(|| EnsembleError::Scheme { url: url.to_owned() })?;
        let (servers, chroot) = match rest.find('/') {
            Some(slash) => rest.split_at(slash),
            None => (rest, ""),
        };
        if !chroot.is_empty() && (chroot == "/" || chroot.split('/').skip(1).any(str::is_empty)) {
            return Err(EnsembleError::Chroot {
                chroot: chroot.to_owned(),
            });
        }
        let servers = servers
            .split(',')
            .enumerate()
            .map(|(i, server)| {
                let index = i + 1;
                let (host, port) = server
                    .rsplit_once(':')
                    .filter(|(host, _)| !host.is_empty())
                    .ok_or_else(|| EnsembleError::Server {
                        index,
                        server: server.to_owned(),
                    })?;
                let port = port
                    .parse::<u16>()
                    .ok()
                    .filter(|&port| port != 0)
                    .ok_or_else(|| EnsembleError::Port {
                        index,
                        port: port.to_owned(),
                    })?;
                Ok((host.to_owned(), port))
            })
            .collect::<Result<_, _>>()?;
        Ok(Ensemble {
            servers,
            chroot: chroot.to_owned(),
        })
    }
}

impl Ensemble {
    /// The client's connect string: `HOST:PORT[,...][/CHROOT]`.
    pub fn connect_string(&self) -> String {
        let servers: Vec<String> = self
            .servers
            .iter()
            .map(|(host, port)| format!("{host}:{port}"))
            .collect();
        format!("{}{}", servers.join(","), self.chroot)
    }
}

impl fmt::Display for Ensemble {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "zk://{}", self.connect_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_urls_are_exact_errors() {
        let refused = |url: &str| url.parse::<Ensemble>().unwrap_err();
        assert_eq!(
            refused("etcd://a:1"),
            EnsembleError::Scheme {
                url: "etcd://a:1".to_owned()
            }
        );
        assert_eq!(
            refused("zk://a:1,b").to_string(),
            "invalid ZooKeeper URL: server 2 \"b\" is not HOST:PORT"
        );
        assert_eq!(
            refused("zk://a:0"),
            EnsembleError::Port {
                index: 1,
                port: "0".to_owned()
            }
        );
        assert_eq!(
            refused("zk://a:65536").to_string(),
            "invalid ZooKeeper URL: server 1's port \"65536\" is not a port number: allowed 1..=65535"
        );
        for chroot in ["/", "/a//b", "/a/"] {
            assert_eq!(
                refused(&format!("zk://a:1{chroot}")),
                EnsembleError::Chroot {
                    chroot: chroot.to_owned()
                }
            );
        }
        let ensemble: Ensemble = "zk://127.0.0.1:2181".parse().unwrap();
        assert_eq!(ensemble.connect_string(), "127.0.0.1:2181");
    }
}
