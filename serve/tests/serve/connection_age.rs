//! How long a connection may live: its maximum age (`Limits::max_connection_age`, closed
//! gracefully, cut after `Limits::max_connection_age_grace`) and, under mTLS, its client
//! certificate's expiry. Served in this process by the tests' [`Server`], driven by
//! `grpcio` (one channel held throughout), a raw HTTP/1.1 connection and `openssl`.
//!
//! Every bound below comes from what the test sets: the age (give or take the tenth it is
//! jittered by), the grace, the certificate's `notAfter`, and [`MARGIN`]; a late bound
//! also from the time the test's process was kept from running meanwhile ([`Stalls`]).

use super::{Server, Setup, tempdir, venv};
use atomflake::Layout;
use atomflake_serve::{Drained, Limits};
use atomflake_test_servers::clients::{PythonClient, curl_https, metric, spawn_piped, tls_pki};
use std::io::{BufReader, Lines, Read, Write};
use std::process::ChildStdout;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How late past its bound the test accepts an end: the server's timer firing, its task
/// run and the client noticing, on a loaded two-core machine.
const MARGIN: Duration = Duration::from_secs(1);

/// What `serve_long_channel.py` said: its channel's states and its calls.
#[derive(Debug, Default)]
struct Channel {
    /// (Unix ms, state).
    states: Vec<(u64, String)>,
    /// (start, end in Unix ms, `ok` or the status code's name, how often the channel had
    /// been READY by then).
    calls: Vec<(u64, u64, String, u32)>,
}

impl Channel {
    /// Reads the script's lines up to `done`.
    fn read(said: &mut Lines<BufReader<ChildStdout>>) -> Channel {
        let mut channel = Channel::default();
        for line in said {
            let line = line.unwrap();
            let words: Vec<&str> = line.split(' ').collect();
            match words[..] {
                ["done"] => return channel,
                ["state", ms, state] => channel.states.push((ms.parse().unwrap(), state.to_owned())),
                ["call", start, end, result, readies] => channel.calls.push((
                    start.parse().unwrap(),
                    end.parse().unwrap(),
                    result.to_owned(),
                    readies.parse().unwrap(),
                )),
                _ => panic!("serve_long_channel.py said {line:?}"),
            }
        }
        panic!("serve_long_channel.py ended before `done`: {channel:?}");
    }

    /// Each connection's time READY: (from, to) in Unix ms, for those that left READY
    /// while calls were still made (not at the channel's close).
    fn connections(&self) -> Vec<(u64, u64)> {
        let last_call = self.calls.iter().map(|call| call.1).max().unwrap_or(0);
        let mut ready = None;
        let mut connections = Vec::new();
        for (ms, state) in self.states.iter().filter(|(ms, _)| *ms <= last_call) {
            match (state.as_str(), ready) {
                ("READY", _) => ready = Some(*ms),
                ("SHUTDOWN", _) => ready = None,
                (_, Some(from)) => {
                    connections.push((from, *ms));
                    ready = None;
                }
                (_, None) => {}
            }
        }
        connections
    }
}

/// How long this process went unrun while the test waited: a thread that wakes every 20 ms
/// counts each wake late by more than 100 ms (less late is [`MARGIN`]'s). Added to the
/// bounds that a loaded machine's scheduler, not the server, pushes out.
struct Stalls {
    late_ms: Arc<AtomicU64>,
    done: Arc<AtomicBool>,
}

impl Stalls {
    fn watch() -> Stalls {
        let (late_ms, done) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicBool::new(false)));
        let (late, ended) = (Arc::clone(&late_ms), Arc::clone(&done));
        std::thread::spawn(move || {
            let tick = Duration::from_millis(20);
            while !ended.load(Ordering::Relaxed) {
                let slept = Instant::now();
                std::thread::sleep(tick);
                let over = ms(slept.elapsed().saturating_sub(tick));
                if over > 100 {
                    late.fetch_add(over, Ordering::Relaxed);
                }
            }
        });
        Stalls { late_ms, done }
    }

    /// The time lost so far.
    fn so_far(&self) -> Duration {
        Duration::from_millis(self.late_ms.load(Ordering::Relaxed))
    }
}

impl Drop for Stalls {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
    }
}

fn ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap()
}

/// A grpcio channel with a client certificate that expires while it is open: the server
/// ends the connection once the certificate has expired (the second after its
/// `notAfter`), within the grace, and the channel's new connection is refused in the
/// handshake, so no call is answered after.
#[test]
fn a_client_certificate_that_expires_on_an_open_connection_ends_it_and_a_new_one_is_refused() {
    let test = "a_client_certificate_that_expires_on_an_open_connection_ends_it_and_a_new_one_is_refused";
    let Some(pki) = tls_pki(test) else {
        return;
    };
    let Some(client) = PythonClient::new(test, &venv(), "serve_long_channel.py") else {
        return;
    };
    let grace = Duration::from_secs(2);
    let limits = Limits {
        max_connection_age_grace: grace,
        ..Limits::default()
    };
    let server = Server::start(Setup::node(4).limits(limits).tls(&pki, Some(pki.path("ca.pem"))));
    // The certificate lives 4 s from its making; the calls go on 3 s past its expiry,
    // grace and margin.
    let life = 4;
    let seconds = life + 1 + grace.as_secs() + MARGIN.as_secs() + 4;
    let stubs = tempdir("stubs-expiry");
    let ca = pki.path("ca.pem");
    let mut command = client.command(&server.address, &stubs, &seconds.to_string());
    command.args(["1", "0.1"]).arg(&ca);
    command.arg(pki.path("brief.crt")).arg(pki.path("brief.key"));
    let (mut script, mut go, mut said) = spawn_piped(&mut command);
    assert_eq!(said.next().unwrap().unwrap(), "ready");
    // Made once the client is ready to call, so that its life is spent on calls.
    pki.expiring_leaf("brief", "ca", "brief", life);
    let expired = (pki.not_after("brief") + 1) * 1000;
    let stalls = Stalls::watch();
    go.write_all(b"go\n").unwrap();
    let channel = Channel::read(&mut said);
    let _ = script.wait();

    let answered: Vec<_> = channel.calls.iter().filter(|call| call.2 == "ok").collect();
    assert!(
        answered.len() >= 5,
        "few calls served before the certificate expired: {channel:?}"
    );
    // The one connection ends at the expiry: at once here, no call being long, and within
    // the grace in any case.
    let connections = channel.connections();
    let &[(opened, ended)] = &connections[..] else {
        panic!("not one connection, ended: {connections:?} in {channel:?}");
    };
    let latest = expired + ms(grace + MARGIN + stalls.so_far());
    assert!(
        opened < expired && (expired..=latest).contains(&ended),
        "the connection of a certificate expired at {expired} (Unix ms) ended at {ended}, \
         not within {expired}..={latest}: {channel:?}"
    );
    // No call answered from a call started after the end: the channel's new connections
    // are refused in the handshake, so it is never READY again.
    assert!(
        channel
            .states
            .iter()
            .filter(|(_, state)| state == "READY")
            .count()
            == 1,
        "the expired certificate connected again: {channel:?}"
    );
    let after: Vec<_> = channel.calls.iter().filter(|call| call.0 > ended).collect();
    assert!(!after.is_empty(), "no call after the end: {channel:?}");
    assert!(
        after.iter().all(|call| call.2 == "UNAVAILABLE"),
        "a call after the end was not refused: {after:?}"
    );
    assert!(
        answered.iter().all(|call| call.1 <= latest),
        "a call answered past {latest}: {answered:?}"
    );

    // Counted, on a connection of a client certificate still valid.
    let key = |name: &str| pki.path(name).display().to_string();
    let (code, _, metrics) = curl_https(
        &server.address,
        "/metrics",
        &[
            "--cacert",
            &key("ca.pem"),
            "--cert",
            &key("client.crt"),
            "--key",
            &key("client.key"),
        ],
    );
    assert_eq!(code, 0, "{metrics}");
    let value = |name: &str| {
        metrics
            .lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no {name} in {metrics}"))
    };
    assert_eq!(
        value("atomflake_connections_closed_total{reason=\"client_certificate_expired\"}"),
        1
    );
    assert!(value("atomflake_tls_handshake_failures_total") >= 1, "{metrics}");
    assert_eq!(server.stop(), Drained::Finished);
    let _ = std::fs::remove_dir_all(stubs);
    println!(
        "{} calls served, the connection ended {} ms after the expiry; the test unrun for {:?}",
        answered.len(),
        ended - expired,
        stalls.so_far()
    );
}

/// A grpcio channel making calls from four threads for several ages: at its age, give or
/// take a tenth, each connection is sent `GOAWAY` and closed once its calls are done, the
/// channel opens a new one, and no call fails.
#[test]
fn at_its_maximum_age_a_grpc_connection_is_sent_goaway_and_grpcio_reconnects_with_no_call_failing() {
    let test =
        "at_its_maximum_age_a_grpc_connection_is_sent_goaway_and_grpcio_reconnects_with_no_call_failing";
    let Some(client) = PythonClient::new(test, &venv(), "serve_long_channel.py") else {
        return;
    };
    let (age, grace) = (Duration::from_secs(1), Duration::from_secs(2));
    let server = Server::start(Setup::node(4).limits(Limits {
        max_connection_age: Some(age),
        max_connection_age_grace: grace,
        ..Limits::default()
    }));
    let seconds = 5;
    let stubs = tempdir("stubs-age");
    let mut command = client.command(&server.address, &stubs, &seconds.to_string());
    command.args(["4", "0.005"]);
    let (mut script, mut go, mut said) = spawn_piped(&mut command);
    assert_eq!(said.next().unwrap().unwrap(), "ready");
    let stalls = Stalls::watch();
    go.write_all(b"go\n").unwrap();
    let channel = Channel::read(&mut said);
    let _ = script.wait();

    let failed: Vec<_> = channel.calls.iter().filter(|call| call.2 != "ok").collect();
    assert!(
        failed.is_empty(),
        "{} of {} calls failed: {failed:?}",
        failed.len(),
        channel.calls.len()
    );
    // Every connection that ended, ended by its age: no later than 1.1 of it and the grace
    // from the channel's READY (which comes after the accept, where the age starts). The
    // channel reports its states late and coalesced (READY again without CONNECTING, when
    // it connected while still reporting the last one), so no time READY bounds an age
    // from below: the count of connections does, below.
    let longest = ms(age * 11 / 10 + grace + MARGIN + stalls.so_far());
    let connections = channel.connections();
    for (opened, ended) in &connections {
        let lived = ended - opened;
        assert!(
            lived <= longest,
            "a connection lived {lived} ms, past {longest}: {channel:?}"
        );
    }
    // Over 5 s, connections of at most 1.1 s and a reconnection each: at least 3 ended.
    assert!(
        connections.len() >= 3,
        "{} connections ended at their age in {seconds} s: {channel:?}",
        connections.len()
    );
    let closed = metric(
        &server.address,
        "atomflake_connections_closed_total{reason=\"max_connection_age\"}",
    );
    assert!(
        closed >= u64::try_from(connections.len()).unwrap(),
        "{closed} closed at their age by the server, {} seen by the channel",
        connections.len()
    );
    // Connections of at least 0.9 of the age: at most one a 0.9 age over the calls, and
    // the one open at their end.
    let readies = channel.calls.last().unwrap().3;
    let most = u32::try_from(ms(Duration::from_secs(seconds)).div_ceil(ms(age * 9 / 10))).unwrap() + 1;
    assert!(
        readies <= most,
        "{readies} connections in {seconds} s of connections of at least {:?}: {channel:?}",
        age * 9 / 10
    );
    println!(
        "{} calls, none failed, over {readies} connections: {connections:?}; the test unrun for {:?}",
        channel.calls.len(),
        stalls.so_far()
    );
    assert_eq!(server.stop(), Drained::Finished);
    let _ = std::fs::remove_dir_all(stubs);
}

/// A raw HTTP/1.1 keep-alive connection to `address` that has sent `GET /v1/ids?count=N`.
fn ask_for_ids(address: &str, count: u32) -> std::net::TcpStream {
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    write!(
        stream,
        "GET /v1/ids?count={count} HTTP/1.1\r\nHost: atomflake\r\n\r\n"
    )
    .unwrap();
    stream
}

/// Reads `stream` until it ends (EOF or reset) or `within` passes: the bytes, and whether
/// it ended.
fn read_to_end(stream: &mut std::net::TcpStream, within: Duration) -> (Vec<u8>, bool) {
    let deadline = Instant::now() + within;
    let mut bytes = Vec::new();
    let mut buffer = vec![0; 1 << 16];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return (bytes, false);
        }
        stream.set_read_timeout(Some(left)).unwrap();
        match stream.read(&mut buffer) {
            Ok(0) => return (bytes, true),
            Ok(read) => bytes.extend_from_slice(&buffer[..read]),
            Err(error)
                if matches!(
                    error.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return (bytes, false);
            }
            Err(_) => return (bytes, true),
        }
    }
}

/// An HTTP/1.1 answer's head, and the answer's whole length by its `Content-Length`.
fn head_of(answer: &[u8]) -> (String, usize) {
    let end = answer
        .windows(4)
        .position(|window| window == b"\r\n\r\n")
        .expect("a whole head");
    let head = String::from_utf8_lossy(&answer[..end]).into_owned();
    let length = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<usize>().unwrap())
        })
        .unwrap_or_else(|| panic!("no Content-Length in {head}"));
    (head, end + 4 + length)
}

/// Over HTTP/1.1 at its maximum age, give or take a tenth: an idle keep-alive connection
/// is closed at once; one with an answer under way reads no other request but sends that
/// answer whole within the grace, then closes; one whose answer is still not done at the
/// end of the grace is cut. On Sonyflake's layout (256 IDs a 10 ms tick, one node) the
/// clock sets the least time an answer takes: 1.5 s for the one under way at the age (at
/// most 1.1 s), which has a grace five times that to finish on a loaded machine (where
/// each tick's wait wakes late); 11 s for the one cut, past the latest end of the grace.
#[test]
fn at_its_maximum_age_an_http1_connection_closes_when_idle_and_after_the_answer_under_way() {
    let (age, grace) = (Duration::from_secs(1), Duration::from_secs(8));
    // IDs a second on one node of Sonyflake's layout.
    let per_second = 25_600;
    let (under_way_ids, cut_ids) = (3 * per_second / 2, 11 * per_second);
    let server = Server::start(Setup::node(4).layout(Layout::SONYFLAKE).limits(Limits {
        max_count: cut_ids,
        max_connection_age: Some(age),
        max_connection_age_grace: grace,
        ..Limits::default()
    }));
    let (earliest, latest) = (age * 9 / 10, age * 11 / 10);
    let stalls = Stalls::watch();
    let opened = Instant::now();
    let mut idle = ask_for_ids(&server.address, 1);
    let mut under_way = ask_for_ids(&server.address, under_way_ids);
    let mut never_read = ask_for_ids(&server.address, cut_ids);

    // Answered, kept alive, then closed at its age, without a grace.
    let (answer, ended) = read_to_end(&mut idle, latest + MARGIN * 2);
    let idle_closed = opened.elapsed();
    let late = latest + MARGIN + stalls.so_far();
    assert!(ended, "the idle connection still open after {idle_closed:?}");
    let (head, length) = head_of(&answer);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(answer.len(), length, "{head}");
    assert!(
        (earliest..=late).contains(&idle_closed),
        "the idle connection closed after {idle_closed:?}, not within {earliest:?}..={late:?}"
    );

    // Read once every connection is past its age: the whole answer, then the close,
    // before the earliest end of the grace.
    std::thread::sleep((latest + Duration::from_millis(300)).saturating_sub(opened.elapsed()));
    let (answer, ended) = read_to_end(
        &mut under_way,
        (earliest + grace).saturating_sub(opened.elapsed()),
    );
    let closed_at = opened.elapsed();
    assert!(
        answer.windows(4).any(|window| window == b"\r\n\r\n"),
        "the answer under way at the age was cut after {closed_at:?}, before its head"
    );
    let (head, length) = head_of(&answer);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(
        answer.len(),
        length,
        "the answer under way at the age was cut after {closed_at:?}"
    );
    assert!(
        ended,
        "the connection of the answer under way still open after {closed_at:?}"
    );
    let body = std::str::from_utf8(&answer[head.len() + 4..]).unwrap();
    assert_eq!(
        atomflake_test_servers::clients::ids_of(body).len(),
        under_way_ids as usize
    );

    // Read after the latest end of the grace: cut short (its IDs take 11 s to mint, so
    // before its head is sent).
    std::thread::sleep((latest + grace + MARGIN).saturating_sub(opened.elapsed()));
    let (answer, ended) = read_to_end(&mut never_read, MARGIN);
    let has_head = answer.windows(4).any(|window| window == b"\r\n\r\n");
    let length = if has_head { head_of(&answer).1 } else { usize::MAX };
    assert!(
        ended && answer.len() < length,
        "the answer not read within the grace was not cut: {} of {length} bytes, ended: {ended}",
        answer.len()
    );
    assert_eq!(
        metric(
            &server.address,
            "atomflake_connections_closed_total{reason=\"max_connection_age\"}"
        ),
        3
    );
    println!(
        "idle closed at {idle_closed:?}; {length} bytes sent whole in the grace; a reader that never \
         read got {} bytes; the test unrun for {:?}",
        answer.len(),
        stalls.so_far()
    );
    assert_eq!(server.stop(), Drained::Finished);
}
