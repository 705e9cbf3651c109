//! The lease's connection, used from a thread of its own so that every call has a
//! deadline on the client's side.
//!
//! The server's `statement_timeout` bounds a statement the server runs; nothing on the
//! server bounds a server that does not run at all: one frozen (`SIGSTOP`, a paused VM)
//! with its host's TCP still up acknowledges every packet and answers nothing, and the
//! client waits for good, in a statement or in the start of a connection. So each call runs
//! on the session's thread while the caller waits for at most its deadline. Past it the
//! call fails as a connection would ([`no_answer`]: transient), and the thread and its
//! connection are given up: the thread finishes the call whenever the server answers, then
//! closes the connection and ends. The next call starts a thread and connects afresh. A
//! statement given up on can still commit later: the lease's statements are safe at any
//! later point (the table in [`lease`](super)).

use super::connection::connect;
use super::error::{DbCause, PostgresError};
use crate::database::Database;
use std::sync::mpsc;
use std::time::Duration;

/// The connection, `None` until a call connects (or after one found it broken).
pub(super) type Connection = Option<postgres::Client>;

/// A call waiting for the session's thread.
type Job = Box<dyn FnOnce(&mut Connection) + Send>;

/// The session's thread and its connection, started by the first call.
#[derive(Debug, Default)]
pub(super) struct Session {
    thread: Option<mpsc::Sender<Job>>,
}

impl Session {
    /// Runs `call` with the connection on the session's thread, waiting for it for at most
    /// `within`.
    ///
    /// # Errors
    ///
    /// What `call` returned; [`no_answer`] past `within`, and when the thread cannot be
    /// started or ended before answering.
    pub(super) fn call<T: Send + 'static>(
        &mut self,
        action: &'static str,
        within: Duration,
        call: impl FnOnce(&mut Connection) -> Result<T, PostgresError> + Send + 'static,
    ) -> Result<T, PostgresError> {
        let (answer, answered) = mpsc::sync_channel(1);
        let job: Job = Box::new(move |connection| {
            let _ = answer.send(call(connection));
        });
        let sent = match &self.thread {
            Some(thread) => thread.send(job),
            None => Err(mpsc::SendError(job)),
        };
        if let Err(mpsc::SendError(job)) = sent {
            // No thread yet, or it ended (a call panicked): a new one.
            let thread = start().map_err(|cause| failed_on(action, cause))?;
            // A new thread receives until its sender is dropped.
            let _ = thread.send(job);
            self.thread = Some(thread);
        }
        match answered.recv_timeout(within) {
            Ok(result) => result,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                self.close();
                Err(no_answer(action, within))
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                self.close();
                Err(failed_on(
                    action,
                    std::io::Error::other("the call ended without an answer"),
                ))
            }
        }
    }

    /// Gives up the thread and its connection: the thread closes it once its call, if any,
    /// has ended.
    pub(super) fn close(&mut self) {
        self.thread = None;
    }
}

/// `call` on the connection, made first when there is none or it is closed. When `call`
/// fails on a connection that was open before and is closed now (the server ended the
/// session, or the network did), once more on a new one: each call given to it must be
/// safe to run twice.
///
/// # Errors
///
/// What `call` returned, or why no connection could be made.
pub(super) fn on_live_connection<T>(
    connection: &mut Connection,
    database: &Database,
    ttl: Duration,
    mut call: impl FnMut(&mut postgres::Client) -> Result<T, PostgresError>,
) -> Result<T, PostgresError> {
    let mut fresh = false;
    loop {
        let client = match &mut *connection {
            Some(client) if !client.is_closed() => client,
            slot => {
                fresh = true;
                slot.insert(connect(database, ttl)?)
            }
        };
        let result = call(client);
        if result.is_err() && client.is_closed() {
            *connection = None;
            if !fresh {
                continue;
            }
        }
        return result;
    }
}

/// A thread that runs calls in turn until its sender is dropped, then closes the
/// connection.
fn start() -> std::io::Result<mpsc::Sender<Job>> {
    let (thread, jobs) = mpsc::channel::<Job>();
    std::thread::Builder::new()
        .name("atomflake-pg-lease".into())
        .spawn(move || {
            let mut connection = None;
            for job in jobs {
                job(&mut connection);
            }
        })?;
    Ok(thread)
}

/// The error of a call the server did not answer within `waited`: transient, as a broken
/// connection is.
pub(super) fn no_answer(action: &'static str, waited: Duration) -> PostgresError {
    let text =
        format!("no answer from the server within {waited:?}: the connection is given up and made again");
    PostgresError::Database {
        action,
        cause: DbCause::new(
            std::io::Error::new(std::io::ErrorKind::TimedOut, text.clone()),
            text,
        ),
    }
}

fn failed_on(action: &'static str, cause: std::io::Error) -> PostgresError {
    let text = cause.to_string();
    PostgresError::Database {
        action,
        cause: DbCause::new(cause, text),
    }
}
