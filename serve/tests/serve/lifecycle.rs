//! [`atomflake_serve::Server`]'s lifecycle: the drain at shutdown, its end at the drain time
//! or at the cut, and how the server says it ended. The command's signals, which start
//! and cut the drain, are tested in `cli/tests/serve.rs`.

use super::{DrainCause, Drained, Server, Setup, tempdir, venv};
use atomflake_test_servers::HANG_GUARD;
use atomflake_test_servers::clients::{PythonClient, http_get};
use std::time::Duration;

/// How a drain is ended in [`a_drain_lets_a_stream_under_way_finish_or_ends_it_at_the_drain_time_or_the_cut`].
#[derive(Clone, Copy, Debug, PartialEq)]
enum End {
    /// A drain as long as the hang guard: the stream finishes.
    Finished,
    /// A 1 s drain.
    DrainTime,
    /// A 60 s drain, cut 0.3 s in.
    Cut,
}

#[test]
fn a_drain_lets_a_stream_under_way_finish_or_ends_it_at_the_drain_time_or_the_cut() {
    let test = "a_drain_lets_a_stream_under_way_finish_or_ends_it_at_the_drain_time_or_the_cut";
    let Some(streamer) = PythonClient::new(test, &venv(), "serve_stream.py") else {
        return;
    };
    // 12 M IDs take about 3 s at one Twitter node's cap, longer on a busy machine: past a
    // 1 s drain and past a cut 0.3 s into a 60 s one however fast it runs, and within a
    // drain of the hang guard however slow (a stream cut there never ends).
    for end in [End::Finished, End::DrainTime, End::Cut] {
        let drain = match end {
            End::Finished => HANG_GUARD,
            End::DrainTime => Duration::from_secs(1),
            End::Cut => Duration::from_secs(60),
        };
        let mut server = Server::start(Setup::node(5).drain(drain));
        let stubs = tempdir(&format!("lifecycle-stubs-{end:?}"));
        let (mut client, mut lines) = streamer.stream(&server.address, &stubs, "12000000");
        server.begin_drain();
        std::thread::sleep(Duration::from_millis(300));
        let refused = http_get(&server.address, "/healthz", HANG_GUARD);
        assert!(
            matches!(&refused, Err(error) if error.kind() == std::io::ErrorKind::ConnectionRefused),
            "{end:?}: a new connection was taken in the drain: {refused:?}"
        );
        if end == End::Cut {
            server.cut();
        }
        let last = lines.next().unwrap().unwrap();
        let exit = client.wait().unwrap();
        let logs = server.logs.clone();
        let ended = server.ended();
        assert_eq!(
            (ended.cause, ended.nodes),
            (DrainCause::Shutdown, vec![5]),
            "{end:?}"
        );
        let logs = logs.text();
        assert!(
            logs.contains("shutting down: refusing new requests, finishing those under way"),
            "{logs}"
        );
        if end == End::Finished {
            assert_eq!(ended.drained, Drained::Finished);
            assert_eq!((last.as_str(), exit.success()), ("received 12000000", true));
        } else {
            assert_eq!(ended.drained, Drained::Cut, "{end:?}");
            assert!(last.starts_with("ended ") && !exit.success(), "{end:?}: {last}");
            // The drain time's end is logged; a cut's, by whoever cut it.
            let at_drain_time = "requests still under way after the drain time of 1s: closing";
            assert_eq!(
                logs.contains(at_drain_time),
                end == End::DrainTime,
                "{end:?}: {logs}"
            );
        }
        let _ = std::fs::remove_dir_all(stubs);
    }
}
