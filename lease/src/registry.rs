//! One registry from a lease URL to its engine: [`Registry`], [`Driver`] and [`AnyLease`],
//! explained in the [crate docs](crate#the-registry).

use crate::{Engine, EngineError, Lease, LeaseError, LeaseOptions, LeaseRow, PassedOver};
use atomflake::Layout;
use atomflake::mark::MarkStore;
use std::error::Error;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// An [`Engine`] that finds its servers from a lease URL, which its [`Config`](Engine::Config)
/// parses (its error names what is wrong and never quotes the URL, which can hold a
/// password): what a [`Driver`] needs of it.
pub trait UrlEngine: Engine<Config: FromStr<Err: Error + Send + Sync + 'static>> {
    /// The URL schemes of the engine, lower case, without `://`: `["etcd", "etcds"]`.
    const SCHEMES: &'static [&'static str];

    /// Whether the engine also takes text with no scheme (PostgreSQL's `key=value`
    /// settings). At most one driver of a registry should.
    const SETTINGS: bool = false;
}

/// What [`Registry::acquire`] returns.
pub type Acquired = Result<Box<dyn AnyLease>, AnyLeaseError>;

/// An engine's entry in a [`Registry`]: its schemes, and how to take and list its leases.
#[derive(Clone, Copy)]
pub struct Driver {
    engine: &'static str,
    schemes: &'static [&'static str],
    settings: bool,
    acquire: fn(&str, &Layout, &LeaseOptions) -> Acquired,
    list: fn(&str, &str) -> Result<Vec<LeaseRow>, AnyLeaseError>,
}

impl Driver {
    /// The entry of engine `E`.
    pub const fn of<E: UrlEngine>() -> Driver {
        Driver {
            engine: <E::Error as EngineError>::ENGINE,
            schemes: E::SCHEMES,
            settings: E::SETTINGS,
            acquire: acquire_on::<E>,
            list: list_on::<E>,
        }
    }

    /// The engine's name: `"PostgreSQL"`, `"etcd"`, `"ZooKeeper"`.
    pub fn engine(&self) -> &'static str {
        self.engine
    }

    /// The engine's URL schemes.
    pub fn schemes(&self) -> &'static [&'static str] {
        self.schemes
    }

    /// Whether the engine takes text with no scheme.
    pub fn takes_settings(&self) -> bool {
        self.settings
    }
}

impl fmt::Debug for Driver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Driver")
            .field("engine", &self.engine)
            .field("schemes", &self.schemes)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

fn acquire_on<E: UrlEngine>(url: &str, layout: &Layout, options: &LeaseOptions) -> Acquired {
    let config = url
        .parse::<E::Config>()
        .map_err(|error| AnyLeaseError::InvalidUrl(Box::new(error)))?;
    let lease = Lease::<E>::acquire(&config, layout, options).map_err(AnyLeaseError::lease)?;
    Ok(Box::new(lease))
}

fn list_on<E: UrlEngine>(url: &str, namespace: &str) -> Result<Vec<LeaseRow>, AnyLeaseError> {
    let config = url
        .parse::<E::Config>()
        .map_err(|error| AnyLeaseError::InvalidUrl(Box::new(error)))?;
    crate::list::<E>(&config, namespace).map_err(AnyLeaseError::lease)
}

/// The engines a program has, found by a lease URL's scheme.
#[derive(Debug, Clone, Copy)]
pub struct Registry {
    drivers: &'static [Driver],
}

impl Registry {
    /// A registry of `drivers`; the first whose scheme matches wins.
    pub const fn new(drivers: &'static [Driver]) -> Registry {
        Registry { drivers }
    }

    /// The drivers.
    pub fn drivers(&self) -> &'static [Driver] {
        self.drivers
    }

    /// The driver of `url`: the one whose scheme the URL has (`etcd://…`), compared without
    /// regard to case; for text with no scheme, the one that takes settings.
    ///
    /// # Errors
    ///
    /// [`AnyLeaseError::UnknownScheme`] when no driver has the URL's scheme, or none takes
    /// settings for text with no scheme.
    pub fn driver(&self, url: &str) -> Result<&'static Driver, AnyLeaseError> {
        let found = match scheme(url) {
            Some(scheme) => self.drivers.iter().find(|driver| {
                driver
                    .schemes
                    .iter()
                    .any(|known| known.eq_ignore_ascii_case(scheme))
            }),
            None => self.drivers.iter().find(|driver| driver.settings),
        };
        found.ok_or_else(|| AnyLeaseError::UnknownScheme {
            scheme: scheme(url).map(str::to_owned),
            allowed: self.allowed(),
        })
    }

    /// Claims nodes on the engine of `url`, as [`Lease::acquire`] does.
    ///
    /// # Errors
    ///
    /// [`AnyLeaseError::UnknownScheme`] and [`AnyLeaseError::InvalidUrl`] for a URL no
    /// engine takes; [`AnyLeaseError::Lease`] with the engine's [`LeaseError`].
    pub fn acquire(&self, url: &str, layout: &Layout, options: &LeaseOptions) -> Acquired {
        (self.driver(url)?.acquire)(url, layout, options)
    }

    /// Every node of `namespace` on the engine of `url` that is claimed or has a mark, as
    /// [`list`](crate::list()) does.
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire).
    pub fn list(&self, url: &str, namespace: &str) -> Result<Vec<LeaseRow>, AnyLeaseError> {
        (self.driver(url)?.list)(url, namespace)
    }

    /// What the registry takes, for messages: `postgres://, etcd://, zk:// or PostgreSQL
    /// key=value settings`.
    fn allowed(&self) -> String {
        let mut allowed: Vec<String> = self
            .drivers
            .iter()
            .flat_map(|driver| driver.schemes.iter().map(|scheme| format!("{scheme}://")))
            .collect();
        allowed.extend(
            self.drivers
                .iter()
                .filter(|driver| driver.settings)
                .map(|driver| format!("{} key=value settings", driver.engine)),
        );
        match allowed.split_last() {
            None => "none".to_owned(),
            Some((last, [])) => last.clone(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        }
    }
}

/// The scheme of `url`, when it starts with one (RFC 3986: a letter, then letters, digits,
/// `+`, `-` and `.`) followed by `://`.
fn scheme(url: &str) -> Option<&str> {
    let (scheme, _) = url.split_once("://")?;
    let mut chars = scheme.chars();
    let valid = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    valid.then_some(scheme)
}

/// A lease taken through a [`Registry`]: the engine's [`Lease`], behind
/// `Box<dyn AnyLease>`. The box is the [`MarkStore`] of a generator built on it
/// ([`Builder::mark_store`](atomflake::Builder::mark_store)); dropping it (or the
/// generator) releases its nodes. Its nodes are [`MarkStore::nodes`].
pub trait AnyLease: MarkStore + fmt::Debug {
    /// The engine's name: `"PostgreSQL"`, `"etcd"`, `"ZooKeeper"`.
    fn engine(&self) -> &'static str;
    /// The leased node ID (the lowest, for a lease of several): [`Lease::node`].
    fn node(&self) -> u64;
    /// The namespace.
    fn namespace(&self) -> &str;
    /// The holder's name, as the engine records it.
    fn holder(&self) -> &str;
    /// The claim's generation: [`Lease::generation`].
    fn generation(&self) -> i64;
    /// The lease time.
    fn ttl(&self) -> Duration;
    /// The nodes' highest high-water mark when claimed (Unix ms): [`Lease::high_water_ms`].
    fn high_water_ms(&self) -> u64;
    /// The free nodes the claim passed over: [`Lease::passed_over`].
    fn passed_over(&self) -> &[PassedOver];
    /// Frees the nodes now: [`Lease::release`].
    ///
    /// # Errors
    ///
    /// [`AnyLeaseError::Lease`] with [`LeaseError::Lost`] or the engine's error.
    fn release(self: Box<Self>) -> Result<(), AnyLeaseError>;
}

impl<E: Engine> AnyLease for Lease<E> {
    fn engine(&self) -> &'static str {
        <E::Error as EngineError>::ENGINE
    }
    fn node(&self) -> u64 {
        Lease::node(self)
    }
    fn namespace(&self) -> &str {
        Lease::namespace(self)
    }
    fn holder(&self) -> &str {
        Lease::holder(self)
    }
    fn generation(&self) -> i64 {
        Lease::generation(self)
    }
    fn ttl(&self) -> Duration {
        Lease::ttl(self)
    }
    fn high_water_ms(&self) -> u64 {
        Lease::high_water_ms(self)
    }
    fn passed_over(&self) -> &[PassedOver] {
        Lease::passed_over(self)
    }
    fn release(self: Box<Self>) -> Result<(), AnyLeaseError> {
        Lease::release(*self).map_err(AnyLeaseError::lease)
    }
}

/// Why a [`Registry`] took or listed no lease.
#[derive(Debug)]
#[non_exhaustive]
pub enum AnyLeaseError {
    /// No engine of the registry has the URL's scheme (or, for text with no scheme, takes
    /// settings). Bad input.
    UnknownScheme {
        /// The URL's scheme; `None` for text with no scheme.
        scheme: Option<String>,
        /// What the registry takes, for people.
        allowed: String,
    },
    /// The engine of the URL's scheme cannot read the rest: its error, which never quotes
    /// the URL. Bad input.
    InvalidUrl(Box<dyn Error + Send + Sync>),
    /// The engine's [`LeaseError`], behind one type: [`lease_error`](Self::lease_error)
    /// gives it back.
    Lease {
        /// The `LeaseError<E>`.
        error: Box<dyn Error + Send + Sync>,
        /// Whether trying again later can succeed ([`LeaseError::is_transient`]).
        transient: bool,
        /// Whether the options were bad ([`LeaseError::is_invalid_input`]).
        invalid_input: bool,
    },
}

impl AnyLeaseError {
    fn lease<E: EngineError>(error: LeaseError<E>) -> AnyLeaseError {
        AnyLeaseError::Lease {
            transient: error.is_transient(),
            invalid_input: error.is_invalid_input(),
            error: Box::new(error),
        }
    }

    /// Whether trying again later can succeed: a transient [`LeaseError`].
    pub fn is_transient(&self) -> bool {
        matches!(self, AnyLeaseError::Lease { transient: true, .. })
    }

    /// Whether the input was bad: the URL, or the options ([`LeaseError::is_invalid_input`]).
    pub fn is_invalid_input(&self) -> bool {
        match self {
            AnyLeaseError::UnknownScheme { .. } | AnyLeaseError::InvalidUrl(_) => true,
            AnyLeaseError::Lease { invalid_input, .. } => *invalid_input,
        }
    }

    /// The engine's [`LeaseError`], when this is one of engine error `E`'s.
    pub fn lease_error<E: EngineError>(&self) -> Option<&LeaseError<E>> {
        match self {
            AnyLeaseError::Lease { error, .. } => error.downcast_ref(),
            _ => None,
        }
    }
}

impl fmt::Display for AnyLeaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AnyLeaseError::UnknownScheme {
                scheme: Some(scheme),
                allowed,
            } => {
                write!(
                    f,
                    "the lease URL's scheme {scheme:?} names no engine: allowed {allowed}"
                )
            }
            AnyLeaseError::UnknownScheme {
                scheme: None,
                allowed,
            } => {
                write!(f, "the lease URL has no scheme (SCHEME://…): allowed {allowed}")
            }
            AnyLeaseError::InvalidUrl(error) | AnyLeaseError::Lease { error, .. } => {
                fmt::Display::fmt(error, f)
            }
        }
    }
}

/// The message already holds the inner error's text: the source is what that error has
/// under it.
impl Error for AnyLeaseError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            AnyLeaseError::UnknownScheme { .. } => None,
            AnyLeaseError::InvalidUrl(error) | AnyLeaseError::Lease { error, .. } => error.source(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{Down, Memory};
    use atomflake::Builder;
    use atomflake::mark::Tenure;

    static BOTH: Registry = Registry::new(&[Driver::of::<Memory>(), Driver::of::<Settings>()]);
    static ONLY: Registry = Registry::new(&[Driver::of::<Memory>()]);

    #[test]
    fn a_scheme_picks_its_driver_whatever_its_case() {
        assert_eq!(BOTH.driver("memory://x").unwrap().engine(), "memory");
        assert_eq!(BOTH.driver("MEMORY+tls://x").unwrap().engine(), "memory");
        assert_eq!(BOTH.driver("host=/tmp user=app").unwrap().engine(), "settings");
        // A `://` inside a setting's value is no scheme.
        assert_eq!(BOTH.driver("options='-c a=b://c'").unwrap().engine(), "settings");
    }

    #[test]
    fn an_unknown_scheme_is_named_with_what_is_allowed() {
        let error = BOTH.driver("mysql://user:secret@db").unwrap_err();
        assert!(error.is_invalid_input() && !error.is_transient());
        assert_eq!(
            error.to_string(),
            "the lease URL's scheme \"mysql\" names no engine: allowed memory://, memory+tls:// or settings \
             key=value settings"
        );
        assert_eq!(
            ONLY.driver("host=db").unwrap_err().to_string(),
            "the lease URL has no scheme (SCHEME://…): allowed memory:// or memory+tls://"
        );
    }

    #[test]
    fn a_url_the_engine_cannot_read_is_bad_input_with_the_engines_words() {
        let error = BOTH.list("memory://", "ns").unwrap_err();
        assert!(matches!(error, AnyLeaseError::InvalidUrl(_)));
        assert!(error.is_invalid_input());
        assert_eq!(error.to_string(), "a memory URL names a server after memory://");
    }

    #[test]
    fn bad_options_are_bad_input_and_the_engines_error_comes_back_typed() {
        let error = BOTH
            .acquire("memory://x", &Layout::TWITTER, &LeaseOptions::new("a/b"))
            .unwrap_err();
        assert!(error.is_invalid_input() && !error.is_transient());
        assert_eq!(
            error.lease_error::<Down>(),
            Some(&LeaseError::InvalidNamespace {
                namespace: "a/b".to_owned()
            })
        );
        assert_eq!(error.lease_error::<SettingsError>(), None);
    }

    #[test]
    fn a_lease_through_the_registry_is_the_engines_lease_for_a_generator() {
        let options = LeaseOptions::new("orders").nodes(2);
        let lease = BOTH
            .acquire("memory://registry", &Layout::TWITTER, &options)
            .unwrap();
        assert_eq!(
            (lease.engine(), lease.nodes(), lease.namespace()),
            ("memory", &[0, 1][..], "orders")
        );
        assert_eq!(lease.tenure(), Tenure::lease(options.ttl));
        let generator = Builder::new(Layout::TWITTER)
            .mark_store(lease)
            .build_sharded([0, 1])
            .unwrap();
        let id = generator.next_id();
        let rows = BOTH.list("memory://registry", "orders").unwrap();
        assert_eq!(
            rows.iter().map(|row| (row.node, row.live)).collect::<Vec<_>>(),
            [(0, true), (1, true)]
        );
        assert!(rows[0].high_water_ms > Layout::TWITTER.decode(id).unix_ms);
        drop(generator);
        let rows = BOTH.list("memory://registry", "orders").unwrap();
        assert!(rows.iter().all(|row| !row.live), "released: {rows:?}");
        let again = BOTH
            .acquire("memory://registry", &Layout::TWITTER, &options)
            .unwrap();
        assert_eq!(again.nodes(), [0, 1]);
        again.release().unwrap();
    }

    /// An engine that takes settings and has no servers.
    #[derive(Debug)]
    struct Settings;

    #[derive(Debug, Clone, PartialEq, Eq)]
    struct SettingsError;

    impl fmt::Display for SettingsError {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("no server")
        }
    }

    impl Error for SettingsError {}

    impl EngineError for SettingsError {
        const ENGINE: &'static str = "settings";
        fn is_transient(&self) -> bool {
            true
        }
    }

    impl Engine for Settings {
        type Config = String;
        type Error = SettingsError;
        type Fence = ();
        fn connect(_: &String, _: &LeaseOptions, _: std::time::Instant) -> Result<Settings, SettingsError> {
            Err(SettingsError)
        }
        fn claim(&mut self, _: &crate::ClaimRequest<'_>) -> Result<crate::Attempt<()>, SettingsError> {
            Err(SettingsError)
        }
        fn store(
            &mut self,
            _: &mut [crate::Claim<()>],
            _: u64,
            _: std::time::Instant,
        ) -> crate::Written<SettingsError> {
            Err(SettingsError.into())
        }
        fn release(
            &mut self,
            _: &mut [crate::Claim<()>],
            _: crate::Release,
            _: std::time::Instant,
        ) -> crate::Written<SettingsError> {
            Err(SettingsError.into())
        }
        fn list(_: &String, _: &str) -> Result<Vec<LeaseRow>, SettingsError> {
            Err(SettingsError)
        }
    }

    impl UrlEngine for Settings {
        const SCHEMES: &'static [&'static str] = &[];
        const SETTINGS: bool = true;
    }
}
