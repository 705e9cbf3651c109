//! IDs served from a program's own tokio runtime, beside the program's own axum routes:
//! HTTP/JSON and gRPC IDs of node 1 on one port, the program's routes (which mint on node 2
//! themselves) on another; Ctrl-C drains both.
//!
//! ```text
//! cargo run -p atomflake-serve --example embed
//! curl '127.0.0.1:8081/v1/ids?count=3'   # the IDs server
//! curl 127.0.0.1:8080/orders             # the program's own route
//! ```

use atomflake::{Generator, Layout, ShardedGenerator};
use atomflake_serve::{Limits, Server, Service};
use axum::Router;
use axum::routing::get;
use std::sync::Arc;
use std::time::Duration;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    // Every minter of one ID space on a node of its own: the server on 1, the routes on 2.
    let service = Service::new(
        ShardedGenerator::new(Layout::TWITTER, [1]).expect("node 1 is in Twitter's layout"),
        Limits::default(),
        None,
    )
    .expect("the default limits are within their ranges");
    let orders = Arc::new(Generator::new(Layout::TWITTER, 2).expect("node 2 is in Twitter's layout"));
    let routes = Router::new().route(
        "/orders",
        get(move || {
            let orders = Arc::clone(&orders);
            async move {
                match orders.try_next_id() {
                    Ok(id) => format!("order {id} placed\n"),
                    Err(error) => format!("no order: {error}\n"),
                }
            }
        }),
    );

    let ids = tokio::net::TcpListener::bind("127.0.0.1:8081").await?;
    let own = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
    println!(
        "IDs on {}, the program's routes on {}",
        ids.local_addr()?,
        own.local_addr()?
    );
    let ctrl_c = || async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let server = Server::new(ids, service)
        .drain_time(Duration::from_secs(5))
        .with_graceful_shutdown(ctrl_c());
    let (ended, own_ended) = tokio::join!(
        server.run(),
        axum::serve(own, routes)
            .with_graceful_shutdown(ctrl_c())
            .into_future()
    );
    own_ended?;
    let ended = ended?;
    println!(
        "drained ({:?}); node {:?} no longer minted on",
        ended.drained, ended.nodes
    );
    Ok(())
}
