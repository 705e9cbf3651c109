//! Leases at the security boundary, against real PostgreSQL servers: TLS with a throwaway
//! CA made by `openssl` (libpq's modes, checked in `pg_stat_ssl`), passwords never shown,
//! and a role with exactly the documented grants.

#![cfg(not(loom))]

use atomflake::Builder;
use atomflake_postgres::Database;
use atomflake_postgres::lease::CLAIM_TIMEOUT;
use atomflake_postgres::lease::{self, Lease, LeaseError, LeaseOptions, PostgresError};
use atomflake_test_servers::fleet::layout;
use atomflake_test_servers::pki::{Pki, has_openssl};
use atomflake_test_servers::postgres::{self as pg, Server};
use atomflake_test_servers::{HANG_GUARD, wait_until};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The password of the roles that log in with one: no error or `Debug` may show it.
const PASSWORD: &str = "s3cret-Pw0rd";

/// Fails the test if `text` shows the password.
fn no_password(text: &str) {
    assert!(!text.contains(PASSWORD), "the password is shown: {text}");
}

/// The error of a lease that could not be taken, checked for the password in its text and
/// its `Debug`.
fn refused(database: &Database, namespace: &str) -> LeaseError {
    let error = Lease::acquire(database, &layout(), &LeaseOptions::new(namespace)).unwrap_err();
    no_password(&error.to_string());
    no_password(&format!("{error:?}"));
    error
}

/// Serves TLS with `cert` and `key` (copies the server reads), and checks client
/// certificates against `ca`.
fn serve_tls(server: &Server, cert: &Path, key: &Path, ca: &Path) {
    let copy = |from: &Path, name: &str| {
        let to = server.socket_dir().join(name);
        std::fs::copy(from, &to).unwrap();
        server.give_to_server(&to);
        to
    };
    let (cert, key, ca) = (
        copy(cert, "server.crt"),
        copy(key, "server.key"),
        copy(ca, "client-ca.pem"),
    );
    for (name, value) in [
        ("ssl_cert_file", &cert),
        ("ssl_key_file", &key),
        ("ssl_ca_file", &ca),
    ] {
        server.psql(&format!("ALTER SYSTEM SET {name} = '{}'", value.display()));
    }
    server.psql("ALTER SYSTEM SET ssl = on");
    assert_eq!(server.psql("SELECT pg_reload_conf()").trim(), "t");
    // The reload is asynchronous: wait until new sessions see it.
    let start = Instant::now();
    while start.elapsed() < HANG_GUARD {
        if server.psql("SHOW ssl").trim() == "on" {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!(
        "the server did not turn TLS on in {:?} (the hang guard)",
        start.elapsed()
    );
}

/// Roles for the tests: `app` logs in with [`PASSWORD`] and has the grants a lease needs;
/// `certapp` logs in with a client certificate.
fn make_roles(server: &Server) {
    server.psql(&format!(
        "SET password_encryption = 'scram-sha-256';
         CREATE ROLE app LOGIN PASSWORD '{PASSWORD}'; CREATE ROLE certapp LOGIN;
         {ddl}
         GRANT SELECT, INSERT, UPDATE ON public.atomflake_lease TO app, certapp;",
        ddl = lease::DDL
    ));
    // Over TCP: a password (SCRAM) for everyone, with or without TLS, so that a plain
    // connection would get in and show in pg_stat_ssl; `certapp` only by certificate.
    server.set_hba(
        "hostssl all certapp 127.0.0.1/32 cert\n\
         host all certapp 127.0.0.1/32 reject\n\
         host all all 127.0.0.1/32 scram-sha-256",
    );
}

/// `(ssl, user)` of every lease connection the server has now.
fn lease_sessions(server: &Server) -> Vec<String> {
    server
        .psql(
            "SELECT s.ssl || ' ' || a.usename FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
             WHERE a.application_name = 'atomflake-lease' ORDER BY 1",
        )
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Takes a lease on `database`, mints on it, and returns what `pg_stat_ssl` says of the
/// lease's connection while it is held.
fn lease_and_mint(server: &Server, database: &Database, namespace: &str) -> Vec<String> {
    let lease = Lease::acquire(database, &layout(), &LeaseOptions::new(namespace))
        .unwrap_or_else(|error| panic!("{database}: {error}"));
    let node = lease.node();
    let generator = Builder::new(layout()).mark_store(lease).build(node).unwrap();
    for _ in 0..1000 {
        let _ = generator.next_id();
    }
    let sessions = lease_sessions(server);
    drop(generator);
    // A backend outlives its client's close by a moment: wait until it is gone, so that
    // the next lease's sessions are its own.
    wait_until(
        "the lease's session did not end",
        Duration::from_millis(10),
        || lease_sessions(server).is_empty(),
        String::new,
    );
    sessions
}

#[test]
fn leases_over_tls_verify_the_server_and_never_fall_back_to_plain_text() {
    let test = "tls-verify";
    if !has_openssl(test) {
        return;
    }
    let options = pg::Options {
        tcp: true,
        ..pg::Options::default()
    };
    let Some(server) = Server::start_with(test, options) else {
        return;
    };
    let pki = Pki::new(&server.socket_dir().join("pki"));
    let ca = pki.ca("ca");
    let rogue = pki.ca("rogue");
    let (cert, key) = pki.leaf("server", "ca", "localhost", "DNS:localhost,IP:127.0.0.1");
    let (other_cert, other_key) = pki.leaf("other", "ca", "db.elsewhere", "DNS:db.elsewhere");
    pki.leaf("client", "ca", "certapp", "");
    serve_tls(&server, &cert, &key, &ca);
    make_roles(&server);
    let port = server.port();
    let at = |host: &str, settings: &str| -> Database {
        format!("host={host} port={port} user=app password={PASSWORD} dbname=postgres {settings}")
            .parse()
            .unwrap_or_else(|error| panic!("{settings}: {error}"))
    };
    let ca = ca.display();

    // verify-full with the CA, by name and by address (the certificate names both), and
    // as a URL: every lease connection is TLS.
    for (host, namespace) in [("localhost", "by-name"), ("127.0.0.1", "by-address")] {
        let database = at(host, &format!("sslmode=verify-full sslrootcert={ca}"));
        no_password(&format!("{database} {database:?}"));
        assert_eq!(
            lease_and_mint(&server, &database, namespace),
            ["true app"],
            "{host}"
        );
    }
    let url: Database =
        format!("postgres://app:{PASSWORD}@localhost:{port}/postgres?sslmode=verify-full&sslrootcert={ca}")
            .parse()
            .unwrap();
    assert_eq!(lease_and_mint(&server, &url, "url"), ["true app"]);
    assert_eq!(lease::list(&url, "url").unwrap().len(), 1);

    // require without a root certificate: encrypted, the certificate not checked.
    assert_eq!(
        lease_and_mint(&server, &at("localhost", "sslmode=require"), "require"),
        ["true app"]
    );
    // prefer (libpq's default) takes TLS when the server offers it.
    assert_eq!(
        lease_and_mint(&server, &at("localhost", ""), "prefer"),
        ["true app"]
    );

    // A certificate from another CA is refused by verify-ca and verify-full.
    for mode in ["verify-ca", "verify-full"] {
        let error = refused(
            &at(
                "localhost",
                &format!("sslmode={mode} sslrootcert={}", rogue.display()),
            ),
            "rogue",
        );
        let shown = error.to_string();
        assert!(
            shown.starts_with(&format!(
                "lease database operation \"connect\" failed: app@localhost:{port}/postgres (sslmode={mode}): "
            )) && shown.contains("UnknownIssuer"),
            "{shown}"
        );
    }

    // A server whose certificate names another host: verify-full refuses it, verify-ca
    // (which checks only the signature) takes it.
    serve_tls(&server, &other_cert, &other_key, &pki.path("ca.pem"));
    let error = refused(
        &at("localhost", &format!("sslmode=verify-full sslrootcert={ca}")),
        "other",
    );
    assert!(
        error
            .to_string()
            .contains("invalid peer certificate: certificate not valid for name \"localhost\""),
        "{error}"
    );
    assert_eq!(
        lease_and_mint(
            &server,
            &at("localhost", &format!("sslmode=verify-ca sslrootcert={ca}")),
            "ca"
        ),
        ["true app"]
    );
    serve_tls(&server, &cert, &key, &pki.path("ca.pem"));
    logins_over_tls(&server, &pki);
}

/// Over TLS with verify-full: a wrong password, a client certificate, none, and one the
/// server does not trust.
fn logins_over_tls(server: &Server, pki: &Pki) {
    let port = server.port();
    let ca = pki.path("ca.pem");
    let ca = ca.display();
    let (client_cert, client_key) = (pki.path("client.crt"), pki.path("client.key"));

    // A wrong password is named by its user, never shown.
    let wrong: Database = format!(
        "host=localhost port={port} user=app password={PASSWORD}x dbname=postgres \
         sslmode=verify-full sslrootcert={ca}"
    )
    .parse()
    .unwrap();
    let error = refused(&wrong, "wrong");
    assert!(
        error
            .to_string()
            .contains("password authentication failed for user \"app\""),
        "{error}"
    );

    // A client certificate logs `certapp` in without a password; without it, no way in.
    let as_certapp = |files: &str| -> Database {
        format!(
            "host=localhost port={port} user=certapp dbname=postgres sslmode=verify-full \
             sslrootcert={ca}{files}"
        )
        .parse()
        .unwrap()
    };
    let with_cert = |(cert, key): (PathBuf, PathBuf)| {
        as_certapp(&format!(" sslcert={} sslkey={}", cert.display(), key.display()))
    };
    let by_cert = with_cert((client_cert, client_key));
    assert_eq!(lease_and_mint(server, &by_cert, "cert"), ["true certapp"]);
    let no_cert = as_certapp("");
    let error = refused(&no_cert, "no-cert");
    assert!(error.to_string().contains("(28000)"), "{error}");

    // A client certificate the server does not trust: the server's TLS 1.3 handshake fails
    // after the client's is done. The client has written its startup message by then and
    // only reads after it, so it reads the server's alert (the kernel hands over the bytes
    // received before a reset), and a lease never tries a failed connect again: refused at
    // once, named by the alert.
    let stranger = with_cert(pki.leaf("stranger", "rogue", "certapp", ""));
    let start = Instant::now();
    let error = refused(&stranger, "stranger");
    // A connect tried again would go on for a claim's time.
    let took = start.elapsed();
    assert!(
        took < CLAIM_TIMEOUT,
        "took {took:?}, not under a claim's time ({CLAIM_TIMEOUT:?}) of retries: {error}"
    );
    assert!(
        error.to_string().ends_with(&format!(
            "certapp@localhost:{port}/postgres (sslmode=verify-full): error communicating with the \
             server: received fatal alert: UnknownCA"
        )),
        "{error}"
    );
}

#[test]
fn a_mode_that_asks_for_tls_is_refused_by_a_server_without_it() {
    let test = "tls-none";
    let options = pg::Options {
        tcp: true,
        ..pg::Options::default()
    };
    let Some(server) = Server::start_with(test, options) else {
        return;
    };
    make_roles(&server);
    let port = server.port();
    for mode in ["require", "verify-ca", "verify-full"] {
        // A root certificate is needed to parse the verifying modes; it is never used.
        let root = if mode == "require" {
            String::new()
        } else {
            format!("sslrootcert={}", ca_file(&server).display())
        };
        let database: Database = format!(
            "host=127.0.0.1 port={port} user=app password={PASSWORD} dbname=postgres sslmode={mode} {root}"
        )
        .parse()
        .unwrap();
        let error = refused(&database, "none");
        assert!(
            error.to_string().ends_with("server does not support TLS"),
            "{mode}: {error}"
        );
    }
    // Over the Unix socket, which carries no TLS, too.
    let local: Database = format!("{} sslmode=require", server.conninfo()).parse().unwrap();
    let error = refused(&local, "local");
    assert!(
        error.to_string().ends_with("server does not support TLS"),
        "{error}"
    );
    assert_eq!(lease_sessions(&server), Vec::<String>::new(), "no session got in");

    // prefer (libpq's default) connects in plain text to a server without TLS, as libpq does.
    let prefer: Database = format!("host=127.0.0.1 port={port} user=app password={PASSWORD} dbname=postgres")
        .parse()
        .unwrap();
    assert_eq!(lease_and_mint(&server, &prefer, "prefer"), ["false app"]);
}

/// A CA file for the modes that need one to parse, made once per server.
fn ca_file(server: &Server) -> PathBuf {
    let pki = Pki::new(&server.socket_dir().join("pki"));
    let path = pki.path("unused.pem");
    if !path.exists() {
        pki.ca("unused");
    }
    path
}

#[test]
fn a_role_without_a_grant_gets_an_error_naming_it() {
    let Some(server) = Server::start("lease-grants") else {
        return;
    };
    let as_role = |role: &str| -> Database { server.conninfo_as(role).parse().unwrap() };
    // No table, and no right to create one (PostgreSQL 15: no CREATE on public for all).
    server.psql("CREATE ROLE app LOGIN; REVOKE CREATE ON SCHEMA public FROM PUBLIC");
    let error = refused(&as_role("app"), "grants");
    assert_eq!(
        error,
        LeaseError::Engine(PostgresError::NoLeaseTable { role: "app".into() })
    );
    assert_eq!(
        error.to_string(),
        "the lease table public.atomflake_lease does not exist and role \"app\" may not create \
         it (no CREATE on schema public): create it as a migration role (`atomflake lease ddl`), \
         then GRANT SELECT, INSERT, UPDATE ON public.atomflake_lease TO app"
    );
    assert_eq!(lease::list(&as_role("app"), "grants").unwrap_err(), error);

    // The table made by a migration role; `app` may only read it.
    server.psql(&format!(
        "CREATE ROLE migrator; GRANT CREATE ON SCHEMA public TO migrator; SET ROLE migrator; {}",
        lease::DDL
    ));
    server.psql("RESET ROLE; GRANT SELECT ON public.atomflake_lease TO app");
    let error = refused(&as_role("app"), "grants");
    assert_eq!(
        error,
        LeaseError::Engine(PostgresError::MissingGrant {
            role: "app".into(),
            missing: vec!["INSERT", "UPDATE"]
        })
    );
    assert_eq!(
        error.to_string(),
        "role \"app\" lacks INSERT, UPDATE on public.atomflake_lease: a lease needs GRANT \
         SELECT, INSERT, UPDATE ON public.atomflake_lease TO app"
    );
    assert_eq!(lease::list(&as_role("app"), "grants").unwrap(), []);

    // Without UPDATE alone.
    server.psql("GRANT INSERT ON public.atomflake_lease TO app");
    assert_eq!(
        refused(&as_role("app"), "grants"),
        LeaseError::Engine(PostgresError::MissingGrant {
            role: "app".into(),
            missing: vec!["UPDATE"]
        })
    );

    // With the three, a lease is taken, renewed and released; nothing else was granted.
    server.psql("GRANT UPDATE ON public.atomflake_lease TO app");
    let lease = Lease::acquire(&as_role("app"), &layout(), &LeaseOptions::new("grants")).unwrap();
    let generator = Builder::new(layout()).mark_store(lease).build(0).unwrap();
    let _ = generator.next_id();
    drop(generator);
    let privileges = server.psql(
        "SELECT string_agg(privilege_type, ',' ORDER BY privilege_type) FROM \
         information_schema.role_table_grants WHERE grantee = 'app'",
    );
    assert_eq!(privileges.trim(), "INSERT,SELECT,UPDATE");
    assert_eq!(
        server
            .psql("SELECT count(*) FROM atomflake_lease WHERE expires_at < clock_timestamp()")
            .trim(),
        "1",
        "released"
    );
}

#[test]
fn a_password_comes_from_the_password_file_when_the_string_has_none() {
    let options = pg::Options {
        tcp: true,
        ..pg::Options::default()
    };
    let Some(server) = Server::start_with("passfile", options) else {
        return;
    };
    make_roles(&server);
    let port = server.port();
    let file = server.socket_dir().join("pgpass");
    let without_password = |passfile: &Path| -> Database {
        format!(
            "host=127.0.0.1 port={port} user=app dbname=postgres sslmode=disable passfile={}",
            passfile.display()
        )
        .parse()
        .unwrap()
    };
    std::fs::write(
        &file,
        format!("127.0.0.1:{port}:postgres:other:wrong\n127.0.0.1:{port}:*:app:{PASSWORD}\n"),
    )
    .unwrap();
    std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    assert_eq!(
        lease_and_mint(&server, &without_password(&file), "passfile"),
        ["false app"]
    );

    // A file others may read is refused once it has the password, and named.
    std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let error = refused(&without_password(&file), "passfile");
    assert_eq!(
        error.to_string(),
        format!(
            "lease database operation \"connect\" failed: app@127.0.0.1:{port}/postgres \
             (sslmode=disable): passfile {}: mode 0644 lets others read it: allowed 0600 or less",
            file.display()
        )
    );

    // No line for this user: no password, and the server asks for one.
    std::fs::write(&file, format!("127.0.0.1:{port}:*:other:{PASSWORD}\n")).unwrap();
    std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let error = refused(&without_password(&file), "passfile");
    assert!(error.to_string().ends_with("password missing"), "{error}");
}
