//! `atomflake serve`: IDs over HTTP/JSON and gRPC from one port. The flags (`args.rs`) become
//! a [`Service`] and the options of a [`Server`] (`atomflake-serve`), which owns the
//! lifecycle; SIGTERM and SIGINT become its shutdown and the cut of its drain, SIGHUP its
//! reload trigger.

mod args;
mod nodes;
mod signals;

use crate::Failure;
pub(crate) use args::ServeArgs;
use atomflake_serve::{DrainCause, Server, Service};
use nodes::{generator, leased};
use signals::{count_signals, signal_number};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

pub(crate) fn run(args: &ServeArgs) -> Result<(), Failure> {
    let layout = args.layout.preset()?;
    let file_limit = atomflake_serve::raise_file_limit()
        .map_err(|err| Failure::Other(format!("cannot read the open-file limit: {err}")))?;
    let limits = args.limits(file_limit)?;
    // Read before anything is claimed: a bad file is refused with nothing to release.
    let tls = args.access.tls()?;
    let tokens = match &args.access.token_file {
        Some(file) => Some(Arc::new(
            atomflake_serve::Tokens::from_file(file, args.access.metrics_token).map_err(Failure::Usage)?,
        )),
        None => None,
    };
    let mask = args
        .mask_key_file
        .as_deref()
        .map(crate::commands::mint::key)
        .transpose()?;
    let runtime = runtime(args.threads)?;
    // Watched before the claim: a signal during start-up is not lost, nor fatal.
    let signals = {
        let _context = runtime.enter();
        count_signals()
    };
    // Read before anything is claimed; the claim is its first span.
    let otlp = atomflake_serve::Otlp::from_env(args.otlp_endpoint.as_deref(), layout)
        .map_err(|error| Failure::Usage(error.to_string()))?;
    let (generator, store) = match &otlp {
        Some(otlp) if args.lease.is_some() => otlp.claim(|| generator(layout, args))?,
        _ => generator(layout, args)?,
    };
    let nodes = listed(generator.nodes());
    let leased = store.is_some();
    if *signals.borrow() > 0 {
        // Dropping the generator releases a lease at once, with the mark it started at.
        drop(generator);
        tracing::info!(
            target: "atomflake serve",
            event = if leased { "released" } else { "stopped" },
            nodes = %nodes,
            "a signal during start-up: stopped before serving{}",
            if leased { format!("; node {nodes} released") } else { String::new() }
        );
        return Ok(());
    }
    let marks = if leased {
        "the mark in the lease".to_owned()
    } else {
        args.high_water.describe()
    };
    // The limits are checked already: no error here.
    let mut service = Service::new(generator, limits, store)
        .map_err(|error| Failure::Other(error.to_string()))?
        .allow_origins(&args.cors_origin)
        .map_err(Failure::Usage)?;
    if let Some(tls) = tls {
        service = service.with_tls(tls);
    }
    if let Some(tokens) = tokens {
        service = service.require_tokens(tokens);
    }
    if let Some(mask) = mask {
        service = service.with_mask(mask);
    }
    let result = runtime.block_on(async {
        let mut server = server(args, service, signals, &nodes, &marks, file_limit).await?;
        if let Some(otlp) = otlp {
            server = server.export_otlp(otlp);
        }
        server
            .run()
            .await
            .map_err(|err| Failure::Other(format!("serving failed: {err}")))
    });
    // Connections still open after the drain hold the service: dropping their tasks drops
    // it, and with it the generator, which releases its nodes.
    runtime.shutdown_timeout(Duration::from_secs(1));
    let ended = result?;
    if let DrainCause::Stopped(reason) = ended.cause {
        tracing::info!(target: "atomflake serve", event = "stopped", "stopped");
        return Err(Failure::Other(format!("serve stopped: {reason}")));
    }
    if leased {
        let nodes = listed(ended.nodes);
        tracing::info!(
            target: "atomflake serve",
            event = "released",
            nodes = %nodes,
            "stopped; node {nodes} released"
        );
    } else {
        tracing::info!(target: "atomflake serve", event = "stopped", "stopped");
    }
    Ok(())
}

/// The runtime of `--threads` workers (one per core unless set).
fn runtime(threads: Option<usize>) -> Result<tokio::runtime::Runtime, Failure> {
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = threads {
        atomflake_serve::check_worker_threads(threads)
            .map_err(|error| Failure::Usage(error.named("--threads").to_string()))?;
        runtime.worker_threads(threads);
    }
    runtime
        .enable_all()
        .thread_name("atomflake-serve")
        .build()
        .map_err(|err| Failure::Other(format!("cannot start the runtime: {err}")))
}

/// The server of `service` on `--listen`, its lifecycle tied to the signals, logged as
/// listening.
async fn server(
    args: &ServeArgs,
    service: Service,
    signals: watch::Receiver<u32>,
    nodes: &str,
    marks: &str,
    file_limit: u64,
) -> Result<Server, Failure> {
    let cannot = |err: std::io::Error| Failure::Other(format!("cannot listen on {}: {err}", args.listen));
    let listener = tokio::net::TcpListener::bind(args.listen).await.map_err(cannot)?;
    let address = listener.local_addr().map_err(cannot)?;
    let (tls, max_connections) = (service.tls().is_some(), service.limits().max_connections);
    tracing::info!(
        target: "atomflake serve",
        event = "listening",
        %address,
        layout = %args.layout.layout,
        nodes = %nodes,
        max_connections,
        file_limit,
        tls,
        "listening on {address} ({}), layout {}, node {nodes}; {marks}; \
         at most {max_connections} connections (open-file limit {file_limit})",
        if tls { "HTTPS and gRPC over TLS" } else { "HTTP and gRPC" },
        args.layout.layout,
    );
    let reloads = service.tls().is_some() || service.tokens().is_some();
    let (layout, mut first, mut next) = (service.layout(), signals.clone(), signals);
    let mut server = Server::new(listener, service)
        .drain_time(Duration::from_secs(args.drain))
        .with_graceful_shutdown(async move { signal_number(&mut first, 1).await })
        .cut_drain_when(move |cause| {
            // The second signal; the next one when the drain began because minting ended.
            let cut_at = match cause {
                DrainCause::Shutdown => 2,
                DrainCause::Stopped(_) => *next.borrow() + 1,
            };
            async move {
                signal_number(&mut next, cut_at).await;
                tracing::warn!(
                    target: "atomflake serve",
                    event = "drain_cut",
                    "a second signal: closing the connections now"
                );
            }
        });
    if args.stay_stopped {
        server = server.stay_stopped();
    }
    if reloads {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(hangups) = signal(SignalKind::hangup()) {
            server = server.reload_on(tokio_stream::wrappers::SignalStream::new(hangups), "SIGHUP");
        } else {
            tracing::error!(
                target: "atomflake serve",
                event = "no_signals",
                "cannot watch for SIGHUP: the certificate and tokens are not reloaded by it"
            );
        }
    }
    if let (true, Some(url)) = (args.reclaim, &args.lease) {
        let (url, options, count) = (url.clone(), args.lease_options.clone(), args.nodes);
        server = server.reclaim_with(move || {
            leased(layout, &url, &options, count).map_err(|failure| failure.to_string())
        });
    }
    Ok(server)
}

/// `nodes` comma-separated.
fn listed(nodes: impl IntoIterator<Item = u64>) -> String {
    nodes
        .into_iter()
        .map(|node| node.to_string())
        .collect::<Vec<_>>()
        .join(",")
}
