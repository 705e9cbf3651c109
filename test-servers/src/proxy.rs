//! A loopback TCP proxy whose connections a test can cut, or hold up and let through late,
//! to take a client's link to a server away without touching the server.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the proxy does with connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Forwards every byte both ways.
    Open,
    /// Keeps what clients send from the server (see [`Proxy::hold`]).
    Held,
    /// Closes every connection and refuses new ones (accepts and closes them at once).
    Cut,
}

/// The client-to-server half of one connection.
struct Upstream {
    server: TcpStream,
    /// What the client sent while the proxy held it, not yet sent on; `None` while open.
    held: Option<Vec<u8>>,
}

struct Shared {
    mode: Mutex<Mode>,
    /// Both ends of every open connection, to shut them down when cut.
    streams: Mutex<Vec<TcpStream>>,
    /// The client-to-server half of every connection, to hold and deliver.
    upstreams: Mutex<Vec<Arc<Mutex<Upstream>>>>,
    /// How many bytes servers have sent to clients.
    answered: AtomicU64,
    stopped: AtomicBool,
}

/// A proxy from a free loopback port to `127.0.0.1:target`, forwarding until
/// [`cut`](Proxy::cut) or dropped.
pub struct Proxy {
    port: u16,
    shared: Arc<Shared>,
}

impl Proxy {
    /// Starts forwarding from a free loopback port to `target`.
    pub fn start(target: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared {
            mode: Mutex::new(Mode::Open),
            streams: Mutex::new(Vec::new()),
            upstreams: Mutex::new(Vec::new()),
            answered: AtomicU64::new(0),
            stopped: AtomicBool::new(false),
        });
        let accepting = Arc::clone(&shared);
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if accepting.stopped.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                let mode = *accepting.mode.lock().unwrap();
                if mode == Mode::Cut {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                {
                    let mut streams = accepting.streams.lock().unwrap();
                    streams.push(client.try_clone().unwrap());
                    streams.push(server.try_clone().unwrap());
                }
                let upstream = Arc::new(Mutex::new(Upstream {
                    server: server.try_clone().unwrap(),
                    held: (mode == Mode::Held).then(Vec::new),
                }));
                accepting.upstreams.lock().unwrap().push(Arc::clone(&upstream));
                pipe_up(client.try_clone().unwrap(), upstream);
                pipe_down(server, client, Arc::clone(&accepting));
            }
        });
        Proxy { port, shared }
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Closes every connection through the proxy and refuses new ones until
    /// [`restore`](Proxy::restore).
    pub fn cut(&self) {
        *self.shared.mode.lock().unwrap() = Mode::Cut;
        for stream in self.shared.streams.lock().unwrap().drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
        self.shared.upstreams.lock().unwrap().clear();
    }

    /// Closes every connection through the proxy and goes on forwarding new ones: a link
    /// that breaks under a statement in flight, with the server reachable again at once.
    /// What a client sent before is the server's: a statement that it had received runs
    /// on, its connection's end closed under it.
    pub fn reset(&self) {
        for stream in self.shared.streams.lock().unwrap().drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }

    /// Forwards new connections again.
    pub fn restore(&self) {
        *self.shared.mode.lock().unwrap() = Mode::Open;
    }

    /// Keeps every byte clients send from now on (on the connections open now and on new
    /// ones) from the server, until [`deliver`](Proxy::deliver). The server's answers
    /// still flow: a client sees a server that does not answer.
    pub fn hold(&self) {
        *self.shared.mode.lock().unwrap() = Mode::Held;
        for upstream in self.shared.upstreams.lock().unwrap().iter() {
            upstream.lock().unwrap().held.get_or_insert_with(Vec::new);
        }
    }

    /// Sends the server everything held since [`hold`](Proxy::hold), less the HTTP/2
    /// `RST_STREAM` frames in it, and forwards every byte again. A request that its client
    /// gave up on while it was held reaches the server whole, as one does that a server
    /// took in before it froze: the server applies it now, after whatever the client sent
    /// elsewhere in the meantime.
    pub fn deliver(&self) {
        *self.shared.mode.lock().unwrap() = Mode::Open;
        for upstream in self.shared.upstreams.lock().unwrap().iter() {
            let mut upstream = upstream.lock().unwrap();
            if let Some(held) = upstream.held.take() {
                let _ = upstream.server.write_all(&without_resets(&held));
            }
        }
    }

    /// How many bytes the server has sent to clients through the proxy so far.
    pub fn answered(&self) -> u64 {
        self.shared.answered.load(Ordering::SeqCst)
    }
}

/// `bytes`, a run of whole HTTP/2 frames (after the connection preface, if it starts with
/// it), less its `RST_STREAM` frames.
fn without_resets(bytes: &[u8]) -> Vec<u8> {
    const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    const RST_STREAM: u8 = 0x3;
    let mut kept = Vec::with_capacity(bytes.len());
    let mut rest = bytes;
    if let Some(frames) = rest.strip_prefix(PREFACE) {
        kept.extend_from_slice(PREFACE);
        rest = frames;
    }
    while rest.len() >= 9 {
        let length = usize::try_from(u32::from_be_bytes([0, rest[0], rest[1], rest[2]])).unwrap();
        let end = (9 + length).min(rest.len());
        if rest[3] != RST_STREAM {
            kept.extend_from_slice(&rest[..end]);
        }
        rest = &rest[end..];
    }
    kept.extend_from_slice(rest);
    kept
}

/// Copies what a client sends to its server (or into the held bytes) on a thread of its
/// own until either end closes.
fn pipe_up(from: TcpStream, upstream: Arc<Mutex<Upstream>>) {
    let end = Arc::clone(&upstream);
    pump(
        from,
        move |bytes| {
            let mut upstream = upstream.lock().unwrap();
            match &mut upstream.held {
                Some(held) => {
                    held.extend_from_slice(bytes);
                    true
                }
                None => upstream.server.write_all(bytes).is_ok(),
            }
        },
        move || {
            let _ = end.lock().unwrap().server.shutdown(Shutdown::Both);
        },
    );
}

/// Copies what a server sends to its client on a thread of its own until either end
/// closes, counting the bytes.
fn pipe_down(from: TcpStream, mut to: TcpStream, shared: Arc<Shared>) {
    let end = to.try_clone().unwrap();
    pump(
        from,
        move |bytes| {
            let sent = to.write_all(bytes).is_ok();
            shared.answered.fetch_add(bytes.len() as u64, Ordering::SeqCst);
            sent
        },
        move || {
            let _ = end.shutdown(Shutdown::Both);
        },
    );
}

/// Reads `from` on a thread of its own, handing what it reads to `forward` until `from`
/// closes or `forward` says to stop; then shuts both ends down (the other with `close`).
fn pump(
    mut from: TcpStream,
    mut forward: impl FnMut(&[u8]) -> bool + Send + 'static,
    close: impl FnOnce() + Send + 'static,
) {
    std::thread::spawn(move || {
        let mut buffer = [0; 16 * 1024];
        loop {
            match from.read(&mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if !forward(&buffer[..n]) {
                        break;
                    }
                }
            }
        }
        close();
        let _ = from.shutdown(Shutdown::Both);
    });
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        self.cut();
        // Wakes the accepting thread, which then sees `stopped`.
        let _ = TcpStream::connect_timeout(
            &std::net::SocketAddr::from(([127, 0, 0, 1], self.port)),
            Duration::from_secs(1),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::without_resets;

    #[test]
    fn resets_are_left_out_and_every_other_frame_kept_whole() {
        let frame = |kind: u8, payload: &[u8]| {
            let mut bytes = u32::try_from(payload.len()).unwrap().to_be_bytes()[1..].to_vec();
            bytes.extend_from_slice(&[kind, 0, 0, 0, 0, 1]);
            bytes.extend_from_slice(payload);
            bytes
        };
        let headers = frame(0x1, b"headers");
        let data = frame(0x0, &[7; 300]);
        let reset = frame(0x3, &[0, 0, 0, 8]);
        let preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        let sent = [
            preface.clone(),
            headers.clone(),
            reset.clone(),
            data.clone(),
            reset,
        ]
        .concat();
        assert_eq!(without_resets(&sent), [preface, headers, data].concat());
    }
}
