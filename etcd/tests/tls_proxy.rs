//! A lease over TLS with members behind a TLS-terminating proxy: `haproxy` (from Debian)
//! takes the client's TLS, client certificate required, in front of a member of a
//! real three-member etcd that speaks TLS only and requires client certificates. When that
//! member stops, the proxy still completes each handshake and then closes the connection
//! without a byte, as a member that refused the client's certificate does: the client must
//! pass over it to the members that answer.

#![cfg(not(loom))]

use atomflake::mark::{MarkStore, StoreError, Tenure};
use atomflake::{Builder, Id};
use atomflake_etcd::Endpoints;
use atomflake_etcd::lease::{self, EtcdError, Lease, LeaseError};
use atomflake_lease::{CLAIM_TIMEOUT, CallFailed, LeaseOptions};
use atomflake_test_servers::etcd;
use atomflake_test_servers::fleet::layout;
use atomflake_test_servers::pki::Pki;
use atomflake_test_servers::proxy::Proxy;
use atomflake_test_servers::tls_proxy::TlsProxy;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The lease time: a renewal every 1.5 s, a hold of 4.8 s after each.
const TTL: Duration = Duration::from_secs(6);

/// The namespace of the test.
const NAMESPACE: &str = "proxied";

/// What a refusal of the client's certificate ends with.
const CERTIFICATE_REFUSED: &str = ": the member refused this client's certificate (cert=): give one signed \
                                   by a CA the member trusts (its --trusted-ca-file)";

/// `etcds://` to `ports` on 127.0.0.1, trusting `ca.pem` and presenting `client.crt`.
fn url(pki: &Pki, ports: &[u16]) -> Endpoints {
    let members: Vec<String> = ports.iter().map(|port| format!("127.0.0.1:{port}")).collect();
    format!(
        "etcds://{}?cacert={}&cert={}&key={}",
        members.join(","),
        pki.path("ca.pem").display(),
        pki.path("client.crt").display(),
        pki.path("client.key").display()
    )
    .parse()
    .unwrap()
}

/// A store that passes every call to a lease and keeps the text of each store it failed
/// as a refusal ([`EtcdError::Refused`]).
struct Watched {
    lease: Lease,
    refusals: Arc<Mutex<Vec<String>>>,
}

impl MarkStore for Watched {
    fn mark(&self) -> u64 {
        self.lease.mark()
    }

    fn store(&mut self, unix_ms: u64) -> Result<(), StoreError> {
        self.lease.store(unix_ms).inspect_err(|error| {
            if let Some(LeaseError::Engine(EtcdError::Refused(_))) = error.downcast_ref::<LeaseError>() {
                self.refusals.lock().unwrap().push(error.to_string());
            }
        })
    }

    fn describe(&self) -> String {
        self.lease.describe()
    }

    fn nodes(&self) -> &[u64] {
        self.lease.nodes()
    }

    fn tenure(&self) -> Tenure {
        self.lease.tenure()
    }

    fn lapsed(&self) -> StoreError {
        self.lease.lapsed()
    }

    fn finish(&mut self, unix_ms: u64) {
        self.lease.finish(unix_ms);
    }
}

/// A lease's client reaches one member through a TLS proxy and another directly (through a
/// TCP link that the test can cut). The lease is taken and renewed through the proxy; then
/// the proxy's member stops while the direct link is down for a moment, so that no call
/// finds a member that answers and the client still prefers the proxy. Once the link is
/// back, every call meets the proxy first, which completes each handshake and closes: the
/// client passes over it to the member that answers, the lease is renewed over four lease
/// times and the generator mints throughout, and no call of it, nor of fresh clients
/// listing the namespace and taking a second lease, is reported as a refusal. A client of
/// the proxy alone is refused, as by a member that refused its certificate: it has no
/// other member to try.
#[test]
fn a_lease_passes_over_a_tls_proxy_whose_member_is_down_and_holds_on_a_healthy_one() {
    let test = "etcd-tls-proxy";
    let Some((mut cluster, pki)) = etcd::secure(test, 3, Vec::new()) else {
        return;
    };
    // The proxy's member is a follower, so that stopping it leaves the leader in place.
    let leader = cluster.wait_leader();
    let down = (leader + 1) % 3;
    let healthy = (leader + 2) % 3;
    let Some(proxy) = TlsProxy::start(test, &pki, cluster.client_port(down)) else {
        return;
    };
    let link = Proxy::start(cluster.client_port(healthy));
    let both = url(&pki, &[proxy.port(), link.port()]);
    let options = LeaseOptions::new(NAMESPACE).ttl(TTL);

    // Taken through the proxy while its member runs: the client prefers the proxy after.
    let lease = Lease::acquire(&both, &layout(), &options).unwrap();
    let node = lease.node();
    let refusals = Arc::new(Mutex::new(Vec::new()));
    let watched = Watched {
        lease,
        refusals: refusals.clone(),
    };
    let generator = Builder::new(layout()).mark_store(watched).build(node).unwrap();
    let mut ids: Vec<Id> = (0..100).map(|_| generator.next_id()).collect();

    // The link is down for longer than a renewal's interval, and well within the hold.
    link.cut();
    cluster.kill(down);
    std::thread::sleep(TTL / 4 + Duration::from_millis(200));
    link.restore();

    // Four lease times of minting in bursts a quarter of a second apart; each mint may
    // wait for a renewal, never for long.
    let minting = Instant::now();
    while minting.elapsed() < 4 * TTL {
        for _ in 0..20 {
            let burst = Instant::now();
            loop {
                match generator.try_next_id() {
                    Ok(id) => {
                        ids.push(id);
                        break;
                    }
                    Err(error) if error.is_transient() && burst.elapsed() < TTL / 2 => {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Err(error) => panic!(
                        "after {} IDs, {:?} into the minting with the proxy's member stopped: {error}",
                        ids.len(),
                        minting.elapsed()
                    ),
                }
            }
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    assert_eq!(*refusals.lock().unwrap(), Vec::<String>::new());
    // Fresh clients, which try the proxy first.
    let rows = lease::list(&both, NAMESPACE).unwrap();
    let row = rows.iter().find(|row| row.node == node).unwrap();
    assert!(row.live, "{rows:?}");
    let second = Lease::acquire(&both, &layout(), &options).unwrap();
    assert_ne!(second.node(), node);
    drop(second);

    let distinct: HashSet<Id> = ids.iter().copied().collect();
    assert_eq!(distinct.len(), ids.len());
    drop(generator);
    let rows = lease::list(&both, NAMESPACE).unwrap();
    let row = rows.iter().find(|row| row.node == node).unwrap();
    assert!(!row.live, "released: {rows:?}");
    assert_eq!(
        row.high_water_ms,
        layout().decode(*ids.last().unwrap()).unix_ms + 1
    );

    // Refused at once: not retried for a claim's time, as a transient failure is.
    let alone = url(&pki, &[proxy.port()]);
    let start = Instant::now();
    let error = Lease::acquire(&alone, &layout(), &options).unwrap_err();
    match &error {
        LeaseError::Engine(EtcdError::Refused(CallFailed { cause, .. })) => {
            assert!(cause.ends_with(CERTIFICATE_REFUSED), "{error}");
        }
        other => panic!("not a refusal: {other:?}"),
    }
    let took = start.elapsed();
    assert!(
        took < CLAIM_TIMEOUT,
        "the refusal took {took:?}, not under a claim's time ({CLAIM_TIMEOUT:?}) of retries: {error}"
    );
}
