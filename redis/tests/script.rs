//! The `redis` crate's sync client runs a server-side script against a throwaway Redis
//! (EVALSHA, loaded on NOSCRIPT) and reads `INFO` inside it.

use atomflake_test_servers::redis::{Persistence, Server};

#[test]
fn a_script_runs_by_its_hash_and_reads_the_servers_run_id() {
    let Some(server) = Server::start("redis-script", Persistence::None) else {
        return;
    };
    let client = redis::Client::open(server.url()).unwrap();
    let mut connection = client.get_connection().unwrap();
    let script = redis::Script::new(
        "local info = redis.call('INFO', 'server', 'replication') \
         redis.call('INCR', KEYS[1]) \
         return {string.match(info, 'run_id:(%x+)'), redis.call('GET', KEYS[1])}",
    );
    let first: (String, String) = script.key("runs").invoke(&mut connection).unwrap();
    let second: (String, String) = script.key("runs").invoke(&mut connection).unwrap();
    assert_eq!(first.0.len(), 40, "{first:?}");
    assert_eq!(
        (first.1.as_str(), second.0 == first.0, second.1.as_str()),
        ("1", true, "2")
    );
    assert_eq!(
        server.cli(&["SCRIPT", "EXISTS", script.get_hash()]).as_deref(),
        Ok("1")
    );
}
