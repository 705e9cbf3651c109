//! The PostgreSQL database a lease lives in: where it is, who connects, and how the
//! connection is protected.
//!
//! A [`Database`] is parsed from what libpq takes: a URL (`postgres://app@db.internal/app?sslmode=verify-full`)
//! or `key=value` settings (`host=db.internal user=app sslmode=verify-full`). The TLS
//! settings are libpq's, with libpq's meaning:
//!
//! | `sslmode` | TLS | the server's certificate |
//! |---|---|---|
//! | `disable` | never | - |
//! | `allow`, `prefer` (the default) | when the server offers it, plain otherwise | checked against the root certificate when there is one (below), not otherwise |
//! | `require` | always: a server without TLS is refused | as `prefer` |
//! | `verify-ca` | always | signed by the root certificate |
//! | `verify-full` | always | signed by the root certificate, and names the host connected to |
//!
//! - `sslrootcert=FILE`: the root certificates (PEM). Without it, libpq's default
//!   `~/.postgresql/root.crt` is used when it exists; `verify-ca` and `verify-full` need
//!   one or the other. `sslrootcert=system` takes the system's trusted roots and needs
//!   `verify-full` (the default with it): a public CA signs certificates for anyone's
//!   host, so only the name check makes it mean something.
//! - `sslcert=FILE` and `sslkey=FILE`: a client certificate and its key (PEM), for servers
//!   that authenticate clients by certificate (`hostssl ... cert` in `pg_hba.conf`).
//! - `allow` tries TLS first, as `prefer` does (libpq tries plain first).
//!
//! A mode that asks for TLS never falls back to plain text: a server that does not offer
//! TLS (or a Unix socket, which carries no TLS) is an error. Over TLS the connection binds
//! SCRAM authentication to the server's certificate (`channel_binding=prefer`, as libpq).
//! The certificate files are read at every connection, so a renewed certificate is
//! picked up by the next one. TLS is [rustls](https://docs.rs/rustls) with the *ring*
//! provider: no system OpenSSL is involved.
//!
//! A string without a password takes it as libpq does: from `PGPASSWORD`, else from the
//! first line of the password file (`passfile=FILE`, else `PGPASSFILE`, else `~/.pgpass`;
//! lines `host:port:database:user:password`, `*` for any) that matches the host, port,
//! database and user, read at every connection. A password file that others may read is
//! an error once it has the password (libpq ignores it with a warning). Kept there, a
//! password is neither in the command line (`/proc/PID/cmdline`) nor in the URL.
//!
//! Nothing here shows a password: a [`Database`] displays as `user@host:port/dbname` and
//! its `Debug` hides the password, and no [`ConfigError`] quotes the string it failed on.

mod parse;
mod passfile;
mod tls;

pub use tls::{RootCert, SslMode};

use std::fmt;
use std::path::PathBuf;
use tls::Tls;

/// A connection string that cannot be used. No variant holds the string or a password.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The string does not parse: `reason` names the option or the place.
    #[error("invalid connection string: {reason}")]
    Invalid {
        /// What is wrong, without the value.
        reason: String,
    },
    /// An `sslmode` that libpq does not have.
    #[error("{}", bad_ssl_mode(value))]
    SslMode {
        /// The value given.
        value: String,
    },
    /// `verify-ca` or `verify-full` without a root certificate to verify with.
    #[error(
        "sslmode={mode} needs a root certificate to verify the server with: give sslrootcert=FILE (or \
         sslrootcert=system for the system's roots); the default {} does not exist",
        default.display()
    )]
    NoRootCert {
        /// The mode asked for.
        mode: SslMode,
        /// libpq's default file, which does not exist either.
        default: PathBuf,
    },
    /// `sslrootcert=system` with a mode that does not check the host name.
    #[error(
        "sslrootcert=system needs sslmode=verify-full, not {mode}: a public CA signs certificates for any \
         host, so only the host name check means something"
    )]
    SystemRootsNeedVerifyFull {
        /// The mode asked for.
        mode: SslMode,
    },
    /// `sslcert` without `sslkey`, or the other way round.
    #[error("sslcert and sslkey go together: give both or neither")]
    ClientCertPair,
    /// A certificate or key file that cannot be read or holds nothing usable.
    #[error("{option} {}: {reason}", path.display())]
    File {
        /// The option that names it: `sslrootcert`, `sslcert` or `sslkey`.
        option: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// rustls refused the settings (a key that does not match its certificate, say).
    #[error("TLS settings refused: {reason}")]
    Tls {
        /// rustls' reason.
        reason: String,
    },
}

/// The `sslmode` message: a value that could be anything but a misspelt mode is not shown.
fn bad_ssl_mode(value: &str) -> String {
    let allowed: Vec<&str> = SslMode::ALL.iter().map(|mode| mode.as_str()).collect();
    let allowed = allowed.join(", ");
    if value.len() <= 16 && value.bytes().all(|c| c.is_ascii_lowercase() || c == b'-') {
        format!("sslmode {value:?} is invalid: allowed {allowed}")
    } else {
        format!("sslmode is invalid (not shown): allowed {allowed}")
    }
}

/// A PostgreSQL database to connect to: the client's [`postgres::Config`] and the TLS
/// settings (see the [module docs](self)).
///
/// # Examples
///
/// ```
/// use atomflake_postgres::database::{Database, SslMode};
///
/// let database: Database = "postgres://app:s3cret@db.internal:5433/ids?sslmode=require".parse()?;
/// assert_eq!(database.ssl_mode(), SslMode::Require);
/// assert_eq!(database.to_string(), "app@db.internal:5433/ids (sslmode=require)");
/// assert!(!format!("{database:?}").contains("s3cret"));
/// # Ok::<(), atomflake_postgres::database::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct Database {
    config: postgres::Config,
    tls: Tls,
    /// The password file named by `passfile`.
    passfile: Option<PathBuf>,
}

impl Database {
    /// A database reached with `config`, in its TLS mode (`disable`, `prefer` or `require`:
    /// the ones the client's `Config` knows), with no root certificate but libpq's default
    /// file.
    pub fn new(config: postgres::Config) -> Database {
        let mode = match config.get_ssl_mode() {
            postgres::config::SslMode::Disable => SslMode::Disable,
            postgres::config::SslMode::Require => SslMode::Require,
            _ => SslMode::Prefer,
        };
        Database {
            config,
            tls: Tls {
                mode,
                root: None,
                client: None,
            },
            passfile: None,
        }
    }

    /// The client's settings (the TLS mode there is `disable`, `prefer` or `require`:
    /// [`ssl_mode`](Self::ssl_mode) is the one that applies).
    pub fn config(&self) -> &postgres::Config {
        &self.config
    }

    /// The TLS mode.
    pub fn ssl_mode(&self) -> SslMode {
        self.tls.mode
    }

    /// The same database in TLS mode `mode`.
    ///
    /// # Errors
    ///
    /// As parsing: a verifying mode with no root certificate, or `system` roots without
    /// `verify-full`.
    pub fn with_ssl_mode(mut self, mode: SslMode) -> Result<Database, ConfigError> {
        self.tls.mode = mode;
        self.checked()
    }

    /// The same database with the root certificates from `root`.
    ///
    /// # Errors
    ///
    /// As parsing: a file that cannot be read or holds no certificate.
    pub fn with_root_cert(mut self, root: RootCert) -> Result<Database, ConfigError> {
        self.tls.root = Some(root);
        self.checked()
    }

    /// The same database with a client certificate and its key (PEM files).
    ///
    /// # Errors
    ///
    /// As parsing: a file that cannot be read, or a key that does not match.
    pub fn with_client_cert(
        mut self,
        cert: impl Into<PathBuf>,
        key: impl Into<PathBuf>,
    ) -> Result<Database, ConfigError> {
        self.tls.client = Some((cert.into(), key.into()));
        self.checked()
    }

    /// `self`, once its TLS settings have been loaded once.
    fn checked(mut self) -> Result<Database, ConfigError> {
        self.config.ssl_mode(match self.tls.mode {
            SslMode::Disable => postgres::config::SslMode::Disable,
            SslMode::Allow | SslMode::Prefer => postgres::config::SslMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => postgres::config::SslMode::Require,
        });
        if self.tls.mode != SslMode::Disable {
            self.tls.rustls_config()?;
        }
        Ok(self)
    }

    /// The client's settings, to add to (timeouts, an application name). The TLS mode is
    /// not to be changed there.
    pub(crate) fn config_mut(&mut self) -> &mut postgres::Config {
        &mut self.config
    }

    /// A connection, with TLS as set.
    pub(crate) fn connect(&self) -> Result<postgres::Client, ConnectError> {
        let config = match self.password().map_err(ConnectError::Config)? {
            Some(password) => {
                let mut config = self.config.clone();
                config.password(password);
                std::borrow::Cow::Owned(config)
            }
            None => std::borrow::Cow::Borrowed(&self.config),
        };
        if self.tls.mode == SslMode::Disable {
            return config.connect(postgres::NoTls).map_err(ConnectError::Client);
        }
        let tls = self.tls.rustls_config().map_err(ConnectError::Config)?;
        config
            .connect(tokio_postgres_rustls::MakeRustlsConnect::new(tls))
            .map_err(ConnectError::Client)
    }

    /// The same database with its password read from `path` when the connection string
    /// has none (libpq's `passfile`).
    #[must_use]
    pub fn with_passfile(mut self, path: impl Into<PathBuf>) -> Database {
        self.passfile = Some(path.into());
        self
    }

    /// Every `(host, port)` connected to, in order: a Unix socket by its directory, an
    /// address when there is no host name.
    fn targets(&self) -> Vec<(String, u16)> {
        let config = &self.config;
        let ports = config.get_ports();
        let port = |index: usize| match ports {
            [] => 5432,
            [one] => *one,
            many => many.get(index).copied().unwrap_or(5432),
        };
        let hosts: Vec<String> = if config.get_hosts().is_empty() {
            config.get_hostaddrs().iter().map(ToString::to_string).collect()
        } else {
            config
                .get_hosts()
                .iter()
                .map(|host| match host {
                    postgres::config::Host::Tcp(name) => name.clone(),
                    #[cfg(unix)]
                    postgres::config::Host::Unix(dir) => dir.display().to_string(),
                })
                .collect()
        };
        hosts
            .into_iter()
            .enumerate()
            .map(|(index, host)| (host, port(index)))
            .collect()
    }
}

/// Why a connection was not made.
#[derive(Debug)]
pub(crate) enum ConnectError {
    Config(ConfigError),
    Client(postgres::Error),
}

impl From<postgres::Config> for Database {
    fn from(config: postgres::Config) -> Database {
        Database::new(config)
    }
}

/// `user@host:port/dbname`, with every host and port, and the TLS mode: never the password.
impl fmt::Display for Database {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let config = &self.config;
        if let Some(user) = config.get_user() {
            write!(f, "{user}@")?;
        }
        for (index, (host, port)) in self.targets().iter().enumerate() {
            let comma = if index == 0 { "" } else { "," };
            write!(f, "{comma}{host}:{port}")?;
        }
        if let Some(dbname) = config.get_dbname() {
            write!(f, "/{dbname}")?;
        }
        write!(f, " (sslmode={})", self.tls.mode)
    }
}

/// The client's `Debug` (which shows a password as `_`) and the TLS settings.
impl fmt::Debug for Database {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Database")
            .field("config", &self.config)
            .field("ssl_mode", &self.tls.mode)
            .field("root_cert", &self.tls.root)
            .field("client_cert", &self.tls.client)
            .field("passfile", &self.passfile)
            .finish()
    }
}
