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

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

/// How a connection uses TLS: libpq's `sslmode` (see the [module docs](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SslMode {
    /// Never TLS.
    Disable,
    /// TLS when the server offers it (tried first, as [`Prefer`](Self::Prefer)).
    Allow,
    /// TLS when the server offers it; libpq's default.
    Prefer,
    /// Always TLS; the certificate is checked only against a root certificate given.
    Require,
    /// Always TLS, with a certificate signed by the root certificate.
    VerifyCa,
    /// Always TLS, with a certificate signed by the root certificate for the host
    /// connected to.
    VerifyFull,
}

impl SslMode {
    const ALL: [SslMode; 6] = [
        SslMode::Disable,
        SslMode::Allow,
        SslMode::Prefer,
        SslMode::Require,
        SslMode::VerifyCa,
        SslMode::VerifyFull,
    ];

    /// Its name in a connection string.
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Allow => "allow",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    /// Whether a connection in this mode is refused unless it is TLS.
    pub fn requires_tls(self) -> bool {
        matches!(self, SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull)
    }

    /// Whether the server's certificate must be signed by a root certificate.
    fn verifies(self) -> bool {
        matches!(self, SslMode::VerifyCa | SslMode::VerifyFull)
    }
}

impl fmt::Display for SslMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for SslMode {
    type Err = ConfigError;

    fn from_str(value: &str) -> Result<SslMode, ConfigError> {
        SslMode::ALL
            .into_iter()
            .find(|mode| mode.as_str() == value)
            .ok_or_else(|| ConfigError::SslMode {
                value: value.to_owned(),
            })
    }
}

/// Where the root certificates come from.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RootCert {
    /// A PEM file of one or more certificates.
    File(PathBuf),
    /// The system's trusted roots (`sslrootcert=system`).
    System,
}

/// A connection string that cannot be used. No variant holds the string or a password.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// The string does not parse: `reason` names the option or the place.
    Invalid {
        /// What is wrong, without the value.
        reason: String,
    },
    /// An `sslmode` that libpq does not have.
    SslMode {
        /// The value given.
        value: String,
    },
    /// `verify-ca` or `verify-full` without a root certificate to verify with.
    NoRootCert {
        /// The mode asked for.
        mode: SslMode,
        /// libpq's default file, which does not exist either.
        default: PathBuf,
    },
    /// `sslrootcert=system` with a mode that does not check the host name.
    SystemRootsNeedVerifyFull {
        /// The mode asked for.
        mode: SslMode,
    },
    /// `sslcert` without `sslkey`, or the other way round.
    ClientCertPair,
    /// A certificate or key file that cannot be read or holds nothing usable.
    File {
        /// The option that names it: `sslrootcert`, `sslcert` or `sslkey`.
        option: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// rustls refused the settings (a key that does not match its certificate, say).
    Tls {
        /// rustls' reason.
        reason: String,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Invalid { reason } => write!(f, "invalid connection string: {reason}"),
            ConfigError::SslMode { value } => {
                let allowed: Vec<&str> = SslMode::ALL.iter().map(|mode| mode.as_str()).collect();
                // A value that could be anything but a misspelt mode is not shown.
                if value.len() <= 16 && value.bytes().all(|c| c.is_ascii_lowercase() || c == b'-') {
                    write!(f, "sslmode {value:?} is invalid: allowed {}", allowed.join(", "))
                } else {
                    write!(
                        f,
                        "sslmode is invalid (not shown): allowed {}",
                        allowed.join(", ")
                    )
                }
            }
            ConfigError::NoRootCert { mode, default } => write!(
                f,
                "sslmode={mode} needs a root certificate to verify the server with: give \
                 sslrootcert=FILE (or sslrootcert=system for the system's roots); the default \
                 {} does not exist",
                default.display()
            ),
            ConfigError::SystemRootsNeedVerifyFull { mode } => write!(
                f,
                "sslrootcert=system needs sslmode=verify-full, not {mode}: a public CA \
                 signs certificates for any host, so only the host name check means something"
            ),
            ConfigError::ClientCertPair => {
                f.write_str("sslcert and sslkey go together: give both or neither")
            }
            ConfigError::File { option, path, reason } => write!(f, "{option} {}: {reason}", path.display()),
            ConfigError::Tls { reason } => write!(f, "TLS settings refused: {reason}"),
        }
    }
}

impl std::error::Error for ConfigError {}

/// The TLS settings of a [`Database`].
#[derive(Debug, Clone, PartialEq, Eq)]
struct Tls {
    mode: SslMode,
    root: Option<RootCert>,
    /// The client certificate and its key.
    client: Option<(PathBuf, PathBuf)>,
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
            self.tls_config()?;
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
        let tls = self.tls_config().map_err(ConnectError::Config)?;
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

    /// The password for a connection whose string gives none, as libpq finds it:
    /// `PGPASSWORD`, else the first line of the password file (`passfile`, else
    /// `PGPASSFILE`, else `~/.pgpass`) that matches the host, port, database and user. A
    /// file that does not exist gives none; one that others may read is refused when it
    /// has the password.
    fn password(&self) -> Result<Option<Vec<u8>>, ConfigError> {
        if self.config.get_password().is_some() {
            return Ok(None);
        }
        if let Some(password) = std::env::var_os("PGPASSWORD") {
            return Ok(Some(password.into_encoded_bytes()));
        }
        let Some(path) = self
            .passfile
            .clone()
            .or_else(|| std::env::var_os("PGPASSFILE").map(PathBuf::from))
            .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".pgpass")))
        else {
            return Ok(None);
        };
        let Some(user) = self.config.get_user() else {
            return Ok(None);
        };
        let unreadable = |reason: String| ConfigError::File {
            option: "passfile",
            path: path.clone(),
            reason,
        };
        let metadata = match std::fs::metadata(&path) {
            Ok(metadata) => metadata,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(unreadable(error.to_string())),
        };
        let text = std::fs::read_to_string(&path).map_err(|error| unreadable(error.to_string()))?;
        let dbname = self.config.get_dbname().unwrap_or(user);
        let Some(password) = self
            .targets()
            .into_iter()
            .find_map(|(host, port)| passfile_entry(&text, &host, port, dbname, user))
        else {
            return Ok(None);
        };
        // libpq ignores such a file with a warning; here it is an error, once it would
        // have given the password.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = metadata.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                return Err(unreadable(format!(
                    "mode {mode:04o} lets others read it: allowed 0600 or less"
                )));
            }
        }
        Ok(Some(password.into_bytes()))
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

    /// The rustls settings, read from the files now.
    fn tls_config(&self) -> Result<ClientConfig, ConfigError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let algorithms = provider.signature_verification_algorithms;
        let roots = self.roots()?;
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(tls_error)?;
        let builder = match (self.tls.mode, roots) {
            (SslMode::VerifyFull, Some(roots)) => builder.with_root_certificates(roots),
            (mode, None) if mode.verifies() => {
                return Err(ConfigError::NoRootCert {
                    mode,
                    default: default_root_cert().unwrap_or_else(|| PathBuf::from("~/.postgresql/root.crt")),
                });
            }
            (_, roots) => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(CertCheck { roots, algorithms })),
        };
        let mut config = match &self.tls.client {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let chain = CertificateDer::pem_file_iter(cert)
                    .and_then(Iterator::collect::<Result<Vec<_>, _>>)
                    .map_err(|err| file_error("sslcert", cert, &err))?;
                if chain.is_empty() {
                    return Err(no_certificate("sslcert", cert));
                }
                let key = PrivateKeyDer::from_pem_file(key).map_err(|err| file_error("sslkey", key, &err))?;
                builder.with_client_auth_cert(chain, key).map_err(tls_error)?
            }
        };
        // What PostgreSQL 17 asks of a direct TLS connection; earlier servers ignore it.
        config.alpn_protocols = vec![b"postgresql".to_vec()];
        Ok(config)
    }

    /// The root certificates to check the server's with, if any.
    fn roots(&self) -> Result<Option<RootCertStore>, ConfigError> {
        let mode = self.tls.mode;
        let file = match &self.tls.root {
            Some(RootCert::System) => {
                if mode != SslMode::VerifyFull {
                    return Err(ConfigError::SystemRootsNeedVerifyFull { mode });
                }
                let found = rustls_native_certs::load_native_certs();
                let mut roots = RootCertStore::empty();
                roots.add_parsable_certificates(found.certs);
                if roots.is_empty() {
                    return Err(ConfigError::Tls {
                        reason: "sslrootcert=system: no trusted root certificate found on this system"
                            .to_owned(),
                    });
                }
                return Ok(Some(roots));
            }
            Some(RootCert::File(path)) => path.clone(),
            None => match default_root_cert() {
                Some(path) if path.exists() => path,
                _ => return Ok(None),
            },
        };
        let certs = CertificateDer::pem_file_iter(&file)
            .and_then(Iterator::collect::<Result<Vec<_>, _>>)
            .map_err(|err| file_error("sslrootcert", &file, &err))?;
        let mut roots = RootCertStore::empty();
        let (_, refused) = roots.add_parsable_certificates(certs);
        if roots.is_empty() {
            return Err(if refused > 0 {
                ConfigError::File {
                    option: "sslrootcert",
                    path: file,
                    reason: format!("none of its {refused} certificates can be a root"),
                }
            } else {
                no_certificate("sslrootcert", &file)
            });
        }
        Ok(Some(roots))
    }
}

/// The password of the first line of a password file (`host:port:database:user:password`,
/// `*` for any, `\\` escaping `:` and itself, `#` starting a comment) that matches. A Unix
/// socket directory matches its path or `localhost`.
fn passfile_entry(text: &str, host: &str, port: u16, dbname: &str, user: &str) -> Option<String> {
    let port = port.to_string();
    let socket = host.starts_with('/');
    text.lines().find_map(|line| {
        let line = line.trim_end_matches('\r');
        if line.starts_with('#') {
            return None;
        }
        let mut fields = vec![String::new()];
        let mut chars = line.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => fields.last_mut()?.push(chars.next().unwrap_or('\\')),
                ':' if fields.len() < 5 => fields.push(String::new()),
                c => fields.last_mut()?.push(c),
            }
        }
        let [line_host, line_port, line_db, line_user, password] = <[String; 5]>::try_from(fields).ok()?;
        let host_matches = line_host == "*" || line_host == host || (socket && line_host == "localhost");
        let matches = |field: &str, value: &str| field == "*" || field == value;
        (host_matches && matches(&line_port, &port) && matches(&line_db, dbname) && matches(&line_user, user))
            .then_some(password)
    })
}

/// libpq's default root certificate file, `~/.postgresql/root.crt`.
fn default_root_cert() -> Option<PathBuf> {
    let home = std::env::var_os("HOME")?;
    Some(Path::new(&home).join(".postgresql/root.crt"))
}

fn file_error(option: &'static str, path: &Path, error: &rustls::pki_types::pem::Error) -> ConfigError {
    ConfigError::File {
        option,
        path: path.to_owned(),
        reason: match error {
            rustls::pki_types::pem::Error::Io(io) => io.to_string(),
            rustls::pki_types::pem::Error::NoItemsFound => "no PEM item of the kind needed".to_owned(),
            other => format!("not a PEM file ({other})"),
        },
    }
}

fn no_certificate(option: &'static str, path: &Path) -> ConfigError {
    ConfigError::File {
        option,
        path: path.to_owned(),
        reason: "holds no PEM certificate".to_owned(),
    }
}

#[expect(clippy::needless_pass_by_value, reason = "called as map_err(tls_error)")]
fn tls_error(error: rustls::Error) -> ConfigError {
    ConfigError::Tls {
        reason: error.to_string(),
    }
}

/// Why a connection was not made.
#[derive(Debug)]
pub(crate) enum ConnectError {
    Config(ConfigError),
    Client(postgres::Error),
}

impl FromStr for Database {
    type Err = ConfigError;

    /// Parses a libpq URL or `key=value` settings; the TLS options (`sslmode`,
    /// `sslrootcert`, `sslcert`, `sslkey`) are read here, the rest by the client's
    /// [`postgres::Config`].
    fn from_str(text: &str) -> Result<Database, ConfigError> {
        let (rest, options) = take_tls_options(text)?;
        let config: postgres::Config = rest
            .parse()
            .map_err(|err: postgres::Error| ConfigError::Invalid {
                // The client's parse errors name the option, never its value; an option it
                // does not know (every one was checked above) is not named.
                reason: match std::error::Error::source(&err)
                    .map_or_else(|| err.to_string(), ToString::to_string)
                {
                    reason if reason.starts_with("unknown option") => "an unknown option".to_owned(),
                    reason => reason,
                },
            })?;
        let mut tls = Tls {
            mode: SslMode::Prefer,
            root: None,
            client: None,
        };
        let mut mode = None;
        let (mut cert, mut key, mut passfile) = (None, None, None);
        for (name, value) in options {
            match name {
                Own::Mode => mode = Some(value.parse::<SslMode>()?),
                Own::RootCert if value == "system" => tls.root = Some(RootCert::System),
                Own::RootCert => tls.root = Some(RootCert::File(value.into())),
                Own::Cert => cert = Some(PathBuf::from(value)),
                Own::Key => key = Some(PathBuf::from(value)),
                Own::PassFile => passfile = Some(PathBuf::from(value)),
            }
        }
        // libpq: the system's roots make verify-full the default.
        tls.mode = mode.unwrap_or(match tls.root {
            Some(RootCert::System) => SslMode::VerifyFull,
            _ => SslMode::Prefer,
        });
        tls.client = match (cert, key) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            _ => return Err(ConfigError::ClientCertPair),
        };
        Database {
            config,
            tls,
            passfile,
        }
        .checked()
    }
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

/// The options read here, not by the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Own {
    Mode,
    RootCert,
    Cert,
    Key,
    PassFile,
}

impl Own {
    fn named(name: &str) -> Option<Own> {
        Some(match name {
            "sslmode" => Own::Mode,
            "sslrootcert" => Own::RootCert,
            "sslcert" => Own::Cert,
            "sslkey" => Own::Key,
            "passfile" => Own::PassFile,
            _ => return None,
        })
    }
}

/// The options a connection string may hold: the client's and the TLS ones read here.
const OPTIONS: [&str; 23] = [
    "host",
    "hostaddr",
    "port",
    "user",
    "password",
    "dbname",
    "options",
    "application_name",
    "connect_timeout",
    "tcp_user_timeout",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_retries",
    "target_session_attrs",
    "channel_binding",
    "load_balance_hosts",
    "sslnegotiation",
    "sslmode",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "passfile",
];

/// An error unless `key` (at byte `at`) is one of [`OPTIONS`]. An unknown one is not
/// quoted: in a string whose quoting went wrong it can be a piece of a password.
fn check_option(key: &str, at: usize) -> Result<(), ConfigError> {
    if OPTIONS.contains(&key) {
        return Ok(());
    }
    Err(ConfigError::Invalid {
        reason: format!(
            "an unknown option at byte {at} (not shown: with a quote missing, it can be part of \
             a password); allowed: {}",
            OPTIONS.join(", ")
        ),
    })
}

/// `text` without its TLS options, and those options (decoded) in order.
fn take_tls_options(text: &str) -> Result<(String, Vec<(Own, String)>), ConfigError> {
    match ["postgres://", "postgresql://"]
        .iter()
        .find_map(|prefix| text.strip_prefix(prefix).map(|rest| text.len() - rest.len()))
    {
        Some(start) => take_from_url(text, start),
        None => take_from_settings(text),
    }
}

/// From a URL: the parameters after the `?` that follows the credentials.
fn take_from_url(text: &str, start: usize) -> Result<(String, Vec<(Own, String)>), ConfigError> {
    // The client takes the first `@` anywhere as the end of the credentials; libpq, the
    // first before a `/`. Where they could differ, or where a second `@` would make part
    // of a password a host or a database name, the URL is refused.
    if let Some(at) = text[start..].find('@') {
        let credentials = &text[start..start + at];
        if credentials.contains(['/', '?']) || text[start + at + 1..].contains('@') {
            return Err(ConfigError::Invalid {
                reason: "an `@` that does not end the user and password (not shown): escape an \
                         `@` in the user, the password or a parameter as %40"
                    .to_owned(),
            });
        }
    }
    let after_credentials = text[start..].find('@').map_or(start, |at| start + at + 1);
    let Some(query) = text[after_credentials..]
        .find('?')
        .map(|at| after_credentials + at)
    else {
        return Ok((text.to_owned(), Vec::new()));
    };
    let mut kept = Vec::new();
    let mut taken = Vec::new();
    for pair in text[query + 1..].split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let key = percent_decode(key)?;
        check_option(&key, pair.as_ptr() as usize - text.as_ptr() as usize)?;
        match Own::named(&key) {
            Some(option) => taken.push((option, percent_decode(value)?)),
            None => kept.push(pair),
        }
    }
    let mut rest = text[..query].to_owned();
    if !kept.is_empty() {
        rest.push('?');
        rest.push_str(&kept.join("&"));
    }
    Ok((rest, taken))
}

fn percent_decode(text: &str) -> Result<String, ConfigError> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] == b'%' {
            let byte = text
                .get(at + 1..at + 3)
                .filter(|hex| hex.bytes().all(|digit| digit.is_ascii_hexdigit()))
                .and_then(|hex| u8::from_str_radix(hex, 16).ok())
                .ok_or_else(|| ConfigError::Invalid {
                    reason: format!("a bad percent escape at byte {at} of a parameter"),
                })?;
            out.push(byte);
            at += 3;
        } else {
            out.push(bytes[at]);
            at += 1;
        }
    }
    String::from_utf8(out).map_err(|_| ConfigError::Invalid {
        reason: "a parameter that is not UTF-8 once decoded".to_owned(),
    })
}

/// From `key=value` settings (libpq's rules: spaces around `=`, values in single quotes
/// or bare, `\` escaping the next character in both), split where the client splits
/// them: at every Unicode whitespace.
fn take_from_settings(text: &str) -> Result<(String, Vec<(Own, String)>), ConfigError> {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let byte = |index: usize| chars.get(index).map_or(text.len(), |&(at, _)| at);
    let char_at = |index: usize| chars.get(index).map(|&(_, c)| c);
    let skip_spaces = |mut index: usize| {
        while char_at(index).is_some_and(char::is_whitespace) {
            index += 1;
        }
        index
    };
    let mut rest = String::with_capacity(text.len());
    let mut taken = Vec::new();
    let mut index = 0;
    loop {
        index = skip_spaces(index);
        if index == chars.len() {
            break;
        }
        let start = index;
        while char_at(index).is_some_and(|c| c != '=' && !c.is_whitespace()) {
            index += 1;
        }
        let key = &text[byte(start)..byte(index)];
        check_option(key, byte(start))?;
        index = skip_spaces(index);
        if char_at(index) != Some('=') {
            return Err(ConfigError::Invalid {
                reason: format!("option `{key}` has no `=`"),
            });
        }
        let after_equals = index + 1;
        index = skip_spaces(after_equals);
        let spaced = index > after_equals;
        let mut value = String::new();
        if char_at(index) == Some('\'') {
            index += 1;
            loop {
                match char_at(index) {
                    None => {
                        return Err(ConfigError::Invalid {
                            reason: format!("the quoted value of option `{key}` is not closed"),
                        });
                    }
                    Some('\'') => break,
                    Some('\\') if index + 1 < chars.len() => {
                        value.push(chars[index + 1].1);
                        index += 2;
                    }
                    Some(c) => {
                        value.push(c);
                        index += 1;
                    }
                }
            }
            index += 1;
        } else {
            while let Some(c) = char_at(index).filter(|c| !c.is_whitespace()) {
                let escaped = c == '\\' && index + 1 < chars.len();
                if escaped {
                    index += 1;
                }
                value.push(chars[index].1);
                index += 1;
            }
            // `user= password=...`: libpq takes the next setting as the value. An empty
            // value is written `''`; anything else would show the next setting (a
            // password) as a user name, a path or a mode.
            let next_setting = value
                .split_once('=')
                .is_some_and(|(name, _)| OPTIONS.contains(&name));
            if spaced && next_setting {
                return Err(ConfigError::Invalid {
                    reason: format!("option `{key}` has an empty value: write an empty value as ''"),
                });
            }
        }
        if let Some(option) = Own::named(key) {
            taken.push((option, value));
        } else {
            rest.push_str(&text[byte(start)..byte(index)]);
            rest.push(' ');
        }
    }
    Ok((rest, taken))
}

/// The server-certificate check of every mode but `verify-full` (which is rustls' own).
/// With `roots`, the certificate must chain to one of them, whatever names it holds
/// (libpq's `verify-ca`, and `require` or `prefer` with a root certificate at hand).
/// Without, it is taken as it is: TLS encrypts and nothing is authenticated (libpq's
/// `require` and `prefer` without a root certificate). Either way the handshake's
/// signatures are checked, so the server holds the key of the certificate it sent.
#[derive(Debug)]
struct CertCheck {
    roots: Option<RootCertStore>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for CertCheck {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if let Some(roots) = &self.roots {
            let cert = ParsedCertificate::try_from(end_entity)?;
            rustls::client::verify_server_cert_signed_by_trust_anchor(
                &cert,
                roots,
                intermediates,
                now,
                self.algorithms.all,
            )?;
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Database, ConfigError> {
        text.parse()
    }

    #[test]
    fn tls_options_are_taken_out_of_both_forms_and_the_rest_is_the_clients() {
        let (rest, taken) =
            take_tls_options("host=db user='a b' sslmode = require password='x\\'y' sslrootcert=/r.pem")
                .unwrap();
        assert_eq!(rest, "host=db user='a b' password='x\\'y' ");
        assert_eq!(
            taken,
            [
                (Own::Mode, "require".to_owned()),
                (Own::RootCert, "/r.pem".to_owned())
            ]
        );
        let (rest, taken) = take_tls_options(
            "postgres://u:p%3F@h:1/d?sslmode=verify-ca&application_name=x&sslrootcert=%2Fr.pem",
        )
        .unwrap();
        assert_eq!(rest, "postgres://u:p%3F@h:1/d?application_name=x");
        assert_eq!(
            taken,
            [
                (Own::Mode, "verify-ca".to_owned()),
                (Own::RootCert, "/r.pem".to_owned())
            ]
        );
        let (rest, _) = take_tls_options("postgresql://h/d?sslmode=disable").unwrap();
        assert_eq!(rest, "postgresql://h/d");
        // A `?` in the password is the query's start to some readers, and then the
        // password would be shown as a user name: refused, never quoted. Escaped, it is
        // the password's.
        assert!(take_tls_options("postgres://u:a?b@h/d").is_err());
        let (rest, taken) = take_tls_options("postgres://u:a%3Fb@h/d?sslmode=require").unwrap();
        assert_eq!((rest.as_str(), taken.len()), ("postgres://u:a%3Fb@h/d", 1));
    }

    #[test]
    fn every_libpq_mode_parses_and_an_unknown_one_names_the_allowed() {
        let missing = PathBuf::from("/nonexistent/root.pem");
        for mode in SslMode::ALL {
            let parsed = parse(&format!(
                "host=db sslmode={mode} sslrootcert={}",
                missing.display()
            ));
            if mode == SslMode::Disable {
                // No TLS: the file is never read.
                assert_eq!(parsed.unwrap().ssl_mode(), mode);
            } else {
                assert_eq!(
                    parsed.unwrap_err(),
                    ConfigError::File {
                        option: "sslrootcert",
                        path: missing.clone(),
                        reason: "No such file or directory (os error 2)".to_owned()
                    },
                    "{mode}"
                );
            }
        }
        let error = parse("host=db sslmode=verify").unwrap_err();
        assert_eq!(
            error.to_string(),
            "sslmode \"verify\" is invalid: allowed disable, allow, prefer, require, verify-ca, verify-full"
        );
    }

    #[test]
    fn the_first_password_file_line_that_matches_gives_the_password() {
        let file = "# comment\n\
                    db:5432:app:other:not-this-user\n\
                    db:6543:*:app:not-this-port\n\
                    d\\:b:*:*:app:escaped\\:host\n\
                    localhost:*:*:app:on-the-socket\r\n\
                    db:*:app:app:pa\\\\ss:word\n\
                    *:*:*:*:anything\n\
                    short:line\n";
        let entry = |host: &str, port: u16, db: &str, user: &str| passfile_entry(file, host, port, db, user);
        assert_eq!(entry("db", 5432, "app", "app").as_deref(), Some("pa\\ss:word"));
        assert_eq!(entry("d:b", 1, "x", "app").as_deref(), Some("escaped:host"));
        assert_eq!(
            entry("/run/postgresql", 5432, "app", "app").as_deref(),
            Some("on-the-socket")
        );
        assert_eq!(
            entry("db", 5432, "app", "other").as_deref(),
            Some("not-this-user")
        );
        assert_eq!(entry("elsewhere", 1, "x", "y").as_deref(), Some("anything"));
        assert_eq!(
            passfile_entry("short:line\n# c:d:e:f:g\n", "short", 1, "line", "x"),
            None
        );
    }

    /// What every error and every `Debug` or `Display` of a parsed string is checked
    /// against: a password in two halves, so that half of a misquoted one is caught too.
    const HALVES: [&str; 2] = ["Pw0rdQ", "Zecret"];

    fn shows_no_password(text: &str, shown: &str) {
        for half in HALVES {
            assert!(!shown.contains(half), "{text:?} shows {half:?}: {shown}");
        }
    }

    /// Parses `text`, and checks that neither the error nor the database shows the password.
    fn parse_hiding(text: &str) -> Result<Database, ConfigError> {
        let parsed = parse(text);
        match &parsed {
            Ok(database) => shows_no_password(text, &format!("{database} {database:?}")),
            Err(error) => shows_no_password(text, &format!("{error} {error:?}")),
        }
        parsed
    }

    #[test]
    fn no_error_shows_a_password_however_the_string_is_broken() {
        let secret = HALVES.join("");
        let spaced = HALVES.join(" ");
        let cases = [
            format!("host=db password={secret} port=99999"),
            format!("host=db password={secret} sslmode=verify"),
            format!("host=db password={secret} sslmode=verify-full sslrootcert=/nonexistent"),
            format!("host=db password='{secret}"),
            // Misquoted: the second half reads as an option's name.
            format!("host=db password={spaced}"),
            format!("host=db password={spaced}=x"),
            format!("postgres://app:{secret}@db:99999/app"),
            format!("postgres://app:{secret}@db/app?sslmode=nope"),
            format!("postgres://app:{secret}@db/app?bogus=1"),
            format!("postgres://app:{secret}@db/app?sslrootcert=%zz"),
            // An `@` left unescaped in the password: the rest reads as the host.
            format!("postgres://app:{}@{}@db/app", HALVES[0], HALVES[1]),
            format!("postgres://app:{}@{}/w@db/app", HALVES[0], HALVES[1]),
            format!(
                "postgres://db/app?password={}@{}&sslmode=verify-full",
                HALVES[0], HALVES[1]
            ),
            // An empty value takes the next setting, the password, as its value.
            format!("host=db sslmode= password={secret}"),
            format!("host=db sslrootcert= password={secret}"),
            format!("host=db user= password={secret}"),
            format!("host=db dbname = password = {secret}"),
            // The client splits at every Unicode whitespace, and so does the parser here.
            format!("host=db password={}\u{a0}{}=x", HALVES[0], HALVES[1]),
            format!("host=db password={}\u{b}{}=x", HALVES[0], HALVES[1]),
            format!("postgres://db/app?sslrootcert=%+2f&password={secret}"),
        ];
        for text in &cases {
            assert!(parse_hiding(text).is_err(), "{text}");
        }
        assert_eq!(
            parse_hiding(&format!("host=db password={spaced}"))
                .unwrap_err()
                .to_string(),
            format!(
                "invalid connection string: an unknown option at byte 24 (not shown: with a \
                 quote missing, it can be part of a password); allowed: {}",
                OPTIONS.join(", ")
            )
        );
        // A setting after a vertical tab or a no-break space is a setting, TLS ones too.
        for space in ['\u{b}', '\u{a0}'] {
            let database = parse_hiding(&format!("host=db{space}sslmode=disable")).unwrap();
            assert_eq!(database.ssl_mode(), SslMode::Disable);
        }
        assert_eq!(
            parse_hiding("host=db sslmode=require\u{a0}sslrootcert=/nonexistent").unwrap_err(),
            ConfigError::File {
                option: "sslrootcert",
                path: "/nonexistent".into(),
                reason: "No such file or directory (os error 2)".to_owned()
            }
        );
        let database = parse_hiding(&format!("postgres://app:{secret}@db:5433/ids?sslmode=disable")).unwrap();
        assert_eq!(database.to_string(), "app@db:5433/ids (sslmode=disable)");
        let database = parse_hiding(&format!(
            "host=a,b port=1,2 user=app password='{spaced}' dbname=d"
        ))
        .unwrap();
        assert_eq!(database.to_string(), "app@a:1,b:2/d (sslmode=prefer)");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2_000))]

        /// Strings made of options, broken pieces and a password (bare, quoted, spaced, in
        /// a URL): whatever parses or fails, nothing shown holds either half of it.
        #[test]
        fn nothing_shown_holds_the_password(
            pieces in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::strategy::Just("host=db".to_owned()),
                    proptest::strategy::Just("port=5432".to_owned()),
                    proptest::strategy::Just("port=x".to_owned()),
                    proptest::strategy::Just("user=app".to_owned()),
                    proptest::strategy::Just("sslmode=require".to_owned()),
                    proptest::strategy::Just("sslmode=verify".to_owned()),
                    proptest::strategy::Just("sslrootcert=/nonexistent".to_owned()),
                    proptest::strategy::Just("sslcert=/nonexistent".to_owned()),
                    "[a-z=' \\\\@%&?/:é\t]{0,6}",
                ],
                0..6,
            ),
            at in 0usize..6,
            form in 0usize..5,
        ) {
            let (first, second) = (HALVES[0], HALVES[1]);
            let password = match form {
                0 => format!("password={first}{second}"),
                1 => format!("password='{first} {second}'"),
                2 => format!("password={first} {second}"),
                3 => format!("password = '{first}\\'{second}"),
                _ => String::new(),
            };
            let mut pieces = pieces;
            if form == 4 {
                let url = format!("postgres://app:{first}{second}@db/app?{}", pieces.join("&"));
                let _ = parse_hiding(&url);
                let url = format!("postgres://app:{first}@{second}@db/app");
                let _ = parse_hiding(&url);
            } else {
                pieces.insert(at.min(pieces.len()), password);
                let _ = parse_hiding(&pieces.join(" "));
            }
        }
    }
}
