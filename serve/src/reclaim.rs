//! [`reclaim`]: a service whose lease is lost claims nodes afresh and serves on.

use crate::service::{Service, State, WATCH_EVERY};
use crate::watch::StoreWatch;
use atomflake::ShardedGenerator;
use std::sync::Arc;
use std::time::Duration;

/// How long after a failed claim the next is tried.
const RETRY: Duration = Duration::from_secs(1);

/// Each time the lease of a [`reclaiming`](Service::reclaiming) `service` is lost, claims
/// nodes afresh with `claim` and mints on them from then on; until the service drains or
/// stops. Run it beside the service.
///
/// `claim` runs on a blocking thread and returns a generator on new nodes with the watch on
/// its lease ([`Watched`](crate::Watched)): a claim of the engine's, so the generator starts
/// past the nodes' marks, whatever node it gets (the one lost, when free again). Requests
/// wait for it for at most the patience; a claim that fails is tried again every second.
/// The lost generator is dropped once replaced: minting on it had ended with the loss.
pub async fn reclaim<F>(service: Arc<Service>, claim: F)
where
    F: Fn() -> Result<(ShardedGenerator, Arc<StoreWatch>), String> + Send + Sync + 'static,
{
    let claim = Arc::new(claim);
    loop {
        let lost = match service.state() {
            State::Reclaiming(lost) => lost,
            State::Serving => {
                tokio::time::sleep(WATCH_EVERY).await;
                continue;
            }
            State::Draining | State::Stopped(_) => return,
        };
        tracing::error!(
            target: "atomflake serve",
            event = "lost",
            nodes = %listed(&service.nodes()),
            reason = %lost,
            "the lease is lost: claiming fresh nodes ({lost})"
        );
        loop {
            let attempt = {
                let claim = Arc::clone(&claim);
                let traces = service.traces().cloned();
                tokio::task::spawn_blocking(move || match traces {
                    Some(traces) => traces.lease("lease.reclaim", "", || claim()),
                    None => claim(),
                })
                .await
            };
            let (generator, watch) = match attempt {
                Ok(Ok(claimed)) => claimed,
                Ok(Err(error)) => {
                    tracing::error!(
                        target: "atomflake serve",
                        event = "claim_failed",
                        error = %error,
                        "a fresh claim failed, trying again in {RETRY:?}: {error}"
                    );
                    if !matches!(service.state(), State::Reclaiming(_)) {
                        return;
                    }
                    tokio::time::sleep(RETRY).await;
                    continue;
                }
                // The claim panicked (the panic hook has said where): minting ends for
                // good, so that the server exits and its supervisor starts it again.
                Err(_) => {
                    service.stop("claiming fresh nodes panicked");
                    return;
                }
            };
            if !matches!(service.state(), State::Reclaiming(_)) {
                // Draining or stopped meanwhile: the drop releases the nodes at once.
                let _ = tokio::task::spawn_blocking(move || drop(generator)).await;
                return;
            }
            let nodes = listed(&generator.nodes().collect::<Vec<_>>());
            let lost = service.replace(generator, watch);
            service.metrics.count_reclaim();
            tracing::info!(
                target: "atomflake serve",
                event = "reclaimed",
                nodes = %nodes,
                "claimed node {nodes} afresh: serving on it"
            );
            let _ = tokio::task::spawn_blocking(move || drop(lost)).await;
            break;
        }
    }
}

/// `nodes` as `1,2,3`.
fn listed(nodes: &[u64]) -> String {
    nodes.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Limits, Watched};
    use atomflake::mark::{MarkStore, StoreError, Tenure};
    use atomflake::{Builder, Id, Layout};
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    /// A lease on `nodes` that renews every 20 ms until `lost` is set, then is lost.
    #[derive(Debug)]
    struct FakeLease {
        nodes: Vec<u64>,
        lost: Arc<AtomicBool>,
    }

    impl MarkStore for FakeLease {
        fn mark(&self) -> u64 {
            0
        }

        fn store(&mut self, _: u64) -> Result<(), StoreError> {
            if self.lost.load(Ordering::SeqCst) {
                Err(StoreError::lost(format!("node {:?} taken", self.nodes)))
            } else {
                Ok(())
            }
        }

        fn describe(&self) -> String {
            format!("a fake lease on {:?}", self.nodes)
        }

        fn nodes(&self) -> &[u64] {
            &self.nodes
        }

        fn tenure(&self) -> Tenure {
            Tenure::Leased {
                hold: Duration::from_secs(2),
                renew_every: Duration::from_millis(20),
                patience: Duration::from_secs(1),
            }
        }
    }

    /// A generator on a fake lease of `node`, its watch and the switch that loses it.
    fn leased(node: u64) -> (ShardedGenerator, Arc<StoreWatch>, Arc<AtomicBool>) {
        let lost = Arc::new(AtomicBool::new(false));
        let (store, watch) = Watched::new(FakeLease {
            nodes: vec![node],
            lost: Arc::clone(&lost),
        });
        let generator = Builder::new(Layout::TWITTER)
            .mark_store(store)
            .build_sharded([node])
            .unwrap();
        (generator, watch, lost)
    }

    async fn node_of_next_id(service: &Service) -> Result<u64, crate::Refusal> {
        let ids = service.next_ids(1, None).await?;
        Ok(Layout::TWITTER.decode(Id::new(ids[0])).node)
    }

    #[test]
    fn a_lost_lease_is_claimed_afresh_and_requests_go_on_on_the_new_node() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let (generator, watch, lose) = leased(3);
            // Patience past the failed claim's retry, however busy the machine.
            let limits = Limits {
                patience: Duration::from_secs(30),
                ..Limits::default()
            };
            let service = Arc::new(Service::new(generator, limits, Some(watch)).unwrap().reclaiming());
            assert_eq!(node_of_next_id(&service).await, Ok(3));
            let claims = Arc::new(AtomicUsize::new(0));
            let claimed = Arc::clone(&claims);
            // The first fresh claim fails; the second gets node 5.
            let claim = move || {
                if claimed.fetch_add(1, Ordering::SeqCst) == 0 {
                    return Err("no free node".to_owned());
                }
                let (generator, watch, _) = leased(5);
                Ok((generator, watch))
            };
            let reclaiming = tokio::spawn(reclaim(Arc::clone(&service), claim));
            lose.store(true, Ordering::SeqCst);
            // A request made once the loss is seen waits for the new node.
            while !matches!(service.state(), State::Reclaiming(_)) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            assert!(service.liveness().is_ok(), "alive while claiming afresh");
            let health = service.health().unwrap_err();
            assert!(
                health.starts_with("claiming fresh nodes: node [3] taken"),
                "{health}"
            );
            assert_eq!(node_of_next_id(&service).await, Ok(5));
            assert_eq!(service.nodes(), [5]);
            assert_eq!(service.state(), State::Serving);
            assert_eq!(
                claims.load(Ordering::SeqCst),
                2,
                "the failed claim was tried again"
            );
            assert_eq!(
                service.store().unwrap().failed(),
                1,
                "counts go on from the lost lease's"
            );
            // A drain ends the task.
            service.drain();
            reclaiming.await.unwrap();
        });
    }

    /// The race between a health probe and the store's watch, held open: the watch given
    /// to the service is on a store of its own that is never lost, so the generator's
    /// probe finds the lease lost while the watch still says nothing (as a probe does
    /// between the keeper's failed store and the watch's record of it). Reclaiming, the
    /// service answers not ready and stays alive; it does not stop for good.
    #[test]
    fn a_probe_that_finds_the_lease_lost_before_the_watch_leaves_a_reclaiming_service_alive() {
        let lost = Arc::new(AtomicBool::new(false));
        let generator = Builder::new(Layout::TWITTER)
            .mark_store(FakeLease {
                nodes: vec![3],
                lost: Arc::clone(&lost),
            })
            .build_sharded([3])
            .unwrap();
        let (_, watch) = Watched::new(FakeLease {
            nodes: vec![3],
            lost: Arc::new(AtomicBool::new(false)),
        });
        let service = Service::new(generator, Limits::default(), Some(watch))
            .unwrap()
            .reclaiming();
        assert_eq!(service.health(), Ok(()));
        lost.store(true, Ordering::SeqCst);
        // The keeper stores every 20 ms: the generator learns of the loss at its next store.
        let started = std::time::Instant::now();
        let health = loop {
            match service.health() {
                Ok(()) => {
                    assert!(
                        started.elapsed() < Duration::from_secs(30),
                        "the generator never saw the loss (a guard against a hang)"
                    );
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(health) => break health,
            }
        };
        assert_eq!(service.store().unwrap().lost(), None, "the watch saw nothing");
        assert!(health.starts_with("claiming fresh nodes: "), "{health}");
        assert!(health.contains("node [3] taken"), "{health}");
        assert!(
            !matches!(service.state(), State::Stopped(_)),
            "{:?}",
            service.state()
        );
        assert_eq!(service.liveness(), Ok(()));
    }

    #[test]
    fn without_reclaiming_a_lost_lease_stops_the_service() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let (generator, watch, lose) = leased(3);
            let service = Service::new(generator, Limits::default(), Some(watch)).unwrap();
            lose.store(true, Ordering::SeqCst);
            let reason = service.stopped().await;
            assert_eq!(reason, "node [3] taken");
            assert!(service.liveness().is_err());
        });
    }
}
