//! SIGTERM and SIGINT, counted.

use tokio::sync::watch;

/// A count of the SIGTERMs and SIGINTs received from now on, kept by a task of the current
/// runtime. Without them (they cannot be watched), it stays at 0: the server serves until
/// killed.
pub(super) fn count_signals() -> watch::Receiver<u32> {
    use tokio::signal::unix::{SignalKind, signal};
    let (count, counted) = watch::channel(0);
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt()))
    else {
        tracing::error!(
            target: "atomflake serve",
            event = "no_signals",
            "cannot watch for SIGTERM: serving until killed"
        );
        return counted;
    };
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            count.send_modify(|count| *count += 1);
        }
    });
    counted
}

/// Completes once `number` signals have been received.
pub(super) async fn signal_number(signals: &mut watch::Receiver<u32>, number: u32) {
    if signals.wait_for(|count| *count >= number).await.is_err() {
        // The counting task is gone with the runtime: no signal will come.
        std::future::pending::<()>().await;
    }
}
