//! What PostgreSQL itself reports to a lease.

use atomflake_lease::EngineError;
use core::fmt;
use std::sync::Arc;

/// A lease that cannot be taken or kept on PostgreSQL
/// ([`atomflake_lease::LeaseError`] with PostgreSQL's own errors).
pub type LeaseError = atomflake_lease::LeaseError<PostgresError>;

/// What the database client reported, kept whole: the error's
/// [`source`](std::error::Error::source) is the client's own `postgres::Error`.
///
/// Its text is the server's message and SQLSTATE when the server reported the error. Two
/// causes are equal when their texts are.
#[derive(Debug, Clone)]
pub struct DbCause {
    error: Arc<dyn std::error::Error + Send + Sync>,
    text: String,
}

impl DbCause {
    /// The client's error.
    pub fn get(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.error
    }

    pub(crate) fn new(error: impl std::error::Error + Send + Sync + 'static, text: String) -> DbCause {
        DbCause {
            error: Arc::new(error),
            text,
        }
    }
}

impl DbCause {
    /// Whether trying again can help: no SQLSTATE (the connection failed or closed), or a
    /// class that says so: `08` connection, `40` transaction rollback, `53` insufficient
    /// resources, `57` operator intervention (a cancel, a shutdown), `55P03` lock not
    /// available.
    pub fn is_transient(&self) -> bool {
        let Some(code) = self
            .error
            .downcast_ref::<postgres::Error>()
            .and_then(postgres::Error::code)
        else {
            return true;
        };
        let code = code.code();
        ["08", "40", "53", "57"]
            .iter()
            .any(|class| code.starts_with(class))
            || code == "55P03"
    }
}

impl PartialEq for DbCause {
    fn eq(&self, other: &DbCause) -> bool {
        self.text == other.text
    }
}

impl Eq for DbCause {}

impl fmt::Display for DbCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// What PostgreSQL reported to a lease:
/// [`LeaseError::Engine`](atomflake_lease::LeaseError::Engine).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PostgresError {
    /// The lease table `public.atomflake_lease` does not exist, and the role connected
    /// may not create it (no `CREATE` on schema `public`). Permanent: a migration role
    /// creates it (`DDL`, `atomflake lease ddl`) and grants the lease role its privileges.
    NoLeaseTable {
        /// The role connected.
        role: String,
    },
    /// The role connected lacks privileges a lease needs on `public.atomflake_lease`
    /// (`SELECT, INSERT, UPDATE` to claim and renew, `SELECT` to list). Permanent.
    MissingGrant {
        /// The role connected.
        role: String,
        /// The privileges it lacks, of `SELECT`, `INSERT`, `UPDATE`.
        missing: Vec<&'static str>,
    },
    /// A database operation failed (no connection, a server restart, a failed
    /// statement). Transient or permanent as the client's error is; the error is the
    /// [`source`](std::error::Error::source). A lease being renewed is tried again.
    Database {
        /// What was being done: "connect", "claim a node", "renew", ...
        action: &'static str,
        /// What the client reported.
        cause: DbCause,
    },
}

impl EngineError for PostgresError {
    const ENGINE: &'static str = "PostgreSQL";

    /// A statement the server refused is permanent unless its SQLSTATE says otherwise
    /// ([`DbCause::is_transient`]); a missing table or grant is permanent.
    fn is_transient(&self) -> bool {
        match self {
            PostgresError::Database { cause, .. } => cause.is_transient(),
            PostgresError::NoLeaseTable { .. } | PostgresError::MissingGrant { .. } => false,
        }
    }
}

impl fmt::Display for PostgresError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PostgresError::NoLeaseTable { role } => write!(
                f,
                "the lease table public.atomflake_lease does not exist and role {role:?} may not \
                 create it (no CREATE on schema public): create it as a migration role \
                 (`atomflake lease ddl`), then GRANT SELECT, INSERT, UPDATE ON \
                 public.atomflake_lease TO {role}"
            ),
            PostgresError::MissingGrant { role, missing } => write!(
                f,
                "role {role:?} lacks {} on public.atomflake_lease: a lease needs GRANT SELECT, \
                 INSERT, UPDATE ON public.atomflake_lease TO {role}",
                missing.join(", ")
            ),
            PostgresError::Database { action, cause } => {
                write!(f, "lease database operation {action:?} failed: {cause}")
            }
        }
    }
}

impl std::error::Error for PostgresError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PostgresError::Database { cause, .. } => Some(cause.get()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_error_is_transient_as_its_cause_says_and_the_rest_is_permanent() {
        let refused = DbCause::new(
            std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
            "refused".into(),
        );
        assert!(refused.is_transient(), "no SQLSTATE: the connection");
        let error = LeaseError::Engine(PostgresError::Database {
            action: "renew",
            cause: refused,
        });
        assert!(error.is_transient());
        assert_eq!(
            error.to_string(),
            "lease database operation \"renew\" failed: refused"
        );
        for permanent in [
            PostgresError::NoLeaseTable { role: "app".into() },
            PostgresError::MissingGrant {
                role: "app".into(),
                missing: vec!["UPDATE"],
            },
        ] {
            assert!(!LeaseError::Engine(permanent).is_transient());
        }
    }
}
