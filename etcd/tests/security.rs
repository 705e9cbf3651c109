//! Leases on etcd at the security boundary, against a real etcd that speaks TLS only,
//! requires client certificates (`--client-cert-auth`) and has authentication on: users
//! with passwords, a role with readwrite on the namespace's prefix alone, tokens that
//! expire after a second. Certificates are made by `openssl`; users and roles by
//! `etcdctl`, as an operator makes them.

#![cfg(not(loom))]

use atomflake::{Builder, Id};
use atomflake_etcd::Endpoints;
use atomflake_etcd::lease::{self, EtcdError, Lease, LeaseError};
use atomflake_lease::CallFailed;
use atomflake_lease::{CLAIM_TIMEOUT, LeaseOptions};
use atomflake_test_servers::etcd::{Cluster, NAMESPACE, PASSWORD, secure_with_users};
use atomflake_test_servers::fleet::{self, layout};
use atomflake_test_servers::pki::Pki;
use std::collections::HashSet;
use std::time::{Duration, Instant};

/// `etcds://USERINFO127.0.0.1:PORT?QUERY`.
fn url(cluster: &Cluster, userinfo: &str, query: &str) -> Endpoints {
    format!("etcds://{userinfo}{}?{query}", cluster.members())
        .parse()
        .unwrap()
}

/// The query of a client that trusts `ca` and presents the `client` certificate.
fn files(pki: &Pki, ca: &str) -> String {
    format!(
        "cacert={}&cert={}&key={}",
        pki.path(&format!("{ca}.pem")).display(),
        pki.path("client.crt").display(),
        pki.path("client.key").display()
    )
}

/// A cluster of [`secure_with_users`] for `test` (tokens that last `token_ttl_s` unused), its
/// certificates, and the URL of user `app` with its password, trusting the cluster's CA and
/// presenting the client certificate; `None` after a skip.
fn as_app(test: &str, token_ttl_s: u32) -> Option<(Cluster, Pki, Endpoints)> {
    let (cluster, pki) = secure_with_users(test, token_ttl_s)?;
    let endpoints = url(&cluster, &format!("app:{PASSWORD}@"), &files(&pki, "ca"));
    Some((cluster, pki, endpoints))
}

/// Fails the test if `text` shows the password.
fn no_password(text: &str) {
    assert!(!text.contains(PASSWORD), "the password is shown: {text}");
}

/// The error of a lease that could not be taken in `namespace`, checked for the
/// password in its text and `Debug`, and for how long it took: a refusal ends at once,
/// without the retries of a transient failure, which go on for a claim's time
/// ([`CLAIM_TIMEOUT`]): a refusal that took that long was retried.
fn refused(endpoints: &Endpoints, namespace: &str) -> LeaseError {
    let start = Instant::now();
    let error = Lease::acquire(endpoints, &layout(), &LeaseOptions::new(namespace)).unwrap_err();
    let took = start.elapsed();
    no_password(&error.to_string());
    no_password(&format!("{error:?}"));
    assert!(
        took < CLAIM_TIMEOUT,
        "a refusal took {took:?}, not under a claim's time ({CLAIM_TIMEOUT:?}) of retries: {error}"
    );
    error
}

/// The cause of a refusal.
fn cause(error: &LeaseError) -> &str {
    match error {
        LeaseError::Engine(EtcdError::Refused(CallFailed { cause, .. })) => cause,
        other => panic!("not a refusal: {other:?}"),
    }
}

/// With TLS, a client certificate and a password, a lease claims, mints, stores its mark,
/// is listed, releases with the exact mark and is claimed again past it: the whole cycle,
/// by a user whose role has readwrite on the namespace's prefix and nothing else.
#[test]
fn a_lease_over_tls_with_a_password_and_a_role_on_its_prefix_alone_does_the_whole_cycle() {
    let Some((cluster, _pki, endpoints)) = as_app("etcd-tls-cycle", 300) else {
        return;
    };
    assert!(endpoints.is_tls());
    no_password(&endpoints.to_string());
    no_password(&format!("{endpoints:?}"));
    // The cycle runs in namespace "cycle": grant it too, as an operator would.
    cluster.etcdctl(&[
        "role",
        "grant-permission",
        "fleet-rw",
        "--prefix=true",
        "readwrite",
        "/atomflake/lease/cycle/",
    ]);
    fleet::generator_cycle::<lease::Etcd>(&endpoints, Duration::from_secs(2));
}

/// etcd's tokens here last a second unused; the lease renews every 2 s (a lease time of
/// 8 s) and the generator mints in bursts 3 s apart, so calls find their token expired:
/// the client logs in again and the lease holds for over two lease times.
#[test]
fn an_expired_token_is_taken_again_and_the_lease_holds() {
    let Some((_cluster, _pki, endpoints)) = as_app("etcd-token-expiry", 1) else {
        return;
    };
    let options = LeaseOptions::new(NAMESPACE).ttl(Duration::from_secs(8));
    // A mint waits for its mark's store, which the lease gives up at its deadline: half the
    // lease time (each store's, on every engine). Transient errors past it are failures.
    let store_deadline = options.ttl / 2;
    let lease = Lease::acquire(&endpoints, &layout(), &options).unwrap();
    let generator = Builder::new(layout()).mark_store(lease).build(0).unwrap();
    let mut ids: Vec<Id> = Vec::new();
    for _ in 0..7 {
        // The first mint of a burst waits for its mark's store (the clock passed the
        // mark in the pause), a store's deadline at most.
        let burst = Instant::now();
        let mut minted = 0;
        while minted < 100 {
            match generator.try_next_id() {
                Ok(id) => {
                    ids.push(id);
                    minted += 1;
                }
                Err(error) if error.is_transient() && burst.elapsed() < store_deadline => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(error) => panic!(
                    "after {} IDs, {:?} into a burst (a store's deadline {store_deadline:?}): {error}",
                    ids.len(),
                    burst.elapsed()
                ),
            }
        }
        std::thread::sleep(Duration::from_secs(3));
    }
    let distinct: HashSet<Id> = ids.iter().copied().collect();
    assert_eq!(distinct.len(), ids.len());
    drop(generator);
    let rows = lease::list(&endpoints, NAMESPACE).unwrap();
    assert!(!rows[0].live, "released: {rows:?}");
    assert_eq!(
        rows[0].high_water_ms,
        layout().decode(*ids.last().unwrap()).unix_ms + 1
    );
}

/// Each refusal names what to fix, ends at once, and never shows the password.
#[test]
fn refusals_name_what_to_fix_at_once_and_never_show_the_password() {
    let test = "etcd-tls-refusals";
    let Some((cluster, pki)) = secure_with_users(test, 300) else {
        return;
    };
    let good = files(&pki, "ca");

    let error = refused(&url(&cluster, "app:wrong-pw@", &good), NAMESPACE);
    assert!(
        cause(&error).contains(
            "authentication failed, invalid user ID or password: check the password of user \"app\""
        ),
        "{error}"
    );
    let wrong = refused(&url(&cluster, &format!("app:{PASSWORD}x@"), &good), NAMESPACE);
    assert!(cause(&wrong).contains("authentication failed"), "{wrong}");

    let error = refused(&url(&cluster, "other:other-pw@", &good), NAMESPACE);
    assert!(
        cause(&error).ends_with(
            "PermissionDenied: etcdserver: permission denied: user \"other\" may not read and write the lease's \
             keys: give one of its roles readwrite on the prefix /atomflake/lease/fleet/ (etcdctl role \
             grant-permission ROLE --prefix=true readwrite /atomflake/lease/fleet/)"
        ),
        "{error}"
    );

    let error = refused(
        &url(&cluster, &format!("app:{PASSWORD}@"), &files(&pki, "other-ca")),
        NAMESPACE,
    );
    assert!(
        cause(&error).contains("invalid peer certificate: UnknownIssuer"),
        "{error}"
    );
    assert!(cause(&error).contains("check the certificates"), "{error}");

    let system_roots = format!(
        "cert={}&key={}",
        pki.path("client.crt").display(),
        pki.path("client.key").display()
    );
    let error = refused(
        &url(&cluster, &format!("app:{PASSWORD}@"), &system_roots),
        NAMESPACE,
    );
    assert!(
        cause(&error).contains("invalid peer certificate: UnknownIssuer"),
        "{error}"
    );

    // The member is verified by the name in the URL: its certificate is for 127.0.0.1 alone.
    let by_name: Endpoints = format!(
        "etcds://app:{PASSWORD}@localhost:{}?{good}",
        cluster.client_port(0)
    )
    .parse()
    .unwrap();
    let error = refused(&by_name, NAMESPACE);
    assert!(
        cause(&error).contains("invalid peer certificate: certificate not valid for name \"localhost\""),
        "{error}"
    );

    // No client certificate, where etcd requires one; and one etcd does not trust. etcd
    // refuses either after this client's side of the TLS 1.3 handshake is done, and its
    // alert may be lost to a reset: the refusal is the same, at once, either way.
    let ca_only = format!("cacert={}", pki.path("ca.pem").display());
    let error = refused(&url(&cluster, &format!("app:{PASSWORD}@"), &ca_only), NAMESPACE);
    assert!(
        cause(&error).ends_with(
            ": the member requires a client certificate and the etcds:// URL gives none: add cert= \
             and key= (a certificate signed by a CA the member trusts)"
        ),
        "{error}"
    );
    let (cert, key) = pki.leaf("stranger", "other-ca", "app", "");
    let stranger = format!("{ca_only}&cert={}&key={}", cert.display(), key.display());
    let error = refused(&url(&cluster, &format!("app:{PASSWORD}@"), &stranger), NAMESPACE);
    assert!(
        cause(&error).ends_with(
            ": the member refused this client's certificate (cert=): give one signed by a CA the \
             member trusts (its --trusted-ca-file)"
        ),
        "{error}"
    );

    let missing = pki.path("missing.pem");
    let error = refused(
        &url(
            &cluster,
            &format!("app:{PASSWORD}@"),
            &format!("cacert={}", missing.display()),
        ),
        NAMESPACE,
    );
    assert_eq!(
        cause(&error),
        format!(
            "{}: cannot read the CA certificate (cacert) {}: No such file or directory (os error 2)",
            url(&cluster, "app:x@", &format!("cacert={}", missing.display())),
            missing.display()
        )
    );
}
