//! One throwaway server of each lease engine (PostgreSQL, etcd, ZooKeeper, Redis), for the
//! tests that hand them to another language's tests (Python's, Node.js's) by the
//! environment variables `ATOMFLAKE_TEST_POSTGRES`, `_ETCD`, `_ZOOKEEPER` and `_REDIS`.

use crate::etcd::Cluster;
use crate::postgres::Server;
use crate::redis;
use crate::zookeeper::Ensemble;

/// The four servers, stopped when dropped.
pub struct LeaseEngines {
    postgres: Server,
    etcd: Cluster,
    zookeeper: Ensemble,
    redis: redis::Server,
}

impl LeaseEngines {
    /// The four servers, their directories named after `name` (a short one keeps the
    /// PostgreSQL socket's path within 107 bytes); `None` where one cannot start (the
    /// server's start says why, and fails under `CI=true`).
    pub fn start(name: &str) -> Option<LeaseEngines> {
        Some(LeaseEngines {
            postgres: Server::start(name)?,
            etcd: Cluster::start(name, 1)?,
            zookeeper: Ensemble::start(name, 1)?,
            redis: redis::Server::start(name, redis::Persistence::AppendEverySec)?,
        })
    }

    /// The environment variables that name the servers: a lease URL each.
    pub fn env(&self) -> [(&'static str, String); 4] {
        [
            ("ATOMFLAKE_TEST_POSTGRES", self.postgres.conninfo()),
            ("ATOMFLAKE_TEST_ETCD", self.etcd.url()),
            (
                "ATOMFLAKE_TEST_ZOOKEEPER",
                format!("zk://{}", self.zookeeper.connect_string()),
            ),
            ("ATOMFLAKE_TEST_REDIS", self.redis.url()),
        ]
    }
}
