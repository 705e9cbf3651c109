//! The harness itself: a throwaway server starts, answers, survives a crash and restart.
use atomflake_test_servers::postgres as pg;

#[test]
fn throwaway_server_answers_and_restarts() {
    let Some(server) = pg::Server::start("harness") else {
        return;
    };
    assert_eq!(server.psql("select 40 + 2").trim(), "42");
    server.stop("immediate");
    server.start_again();
    assert_eq!(server.psql("select 1").trim(), "1");
}
