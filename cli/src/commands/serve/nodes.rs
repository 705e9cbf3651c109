//! The nodes a server mints on: `--node`, `--statefulset`, or `--lease` (claimed, and
//! claimed afresh by `--reclaim`).

use super::super::lease::{self, LeaseArgs};
use super::super::node_in;
use super::{ServeArgs, listed};
use crate::Failure;
use atomflake::{Builder, Layout, ShardedGenerator};
use atomflake_serve::{StoreWatch, Watched};
use std::sync::Arc;

/// The generator on the nodes `args` name, and the watch on its lease when it has one.
pub(super) fn generator(
    layout: Layout,
    args: &ServeArgs,
) -> Result<(ShardedGenerator, Option<Arc<StoreWatch>>), Failure> {
    let usage = |err: &dyn std::fmt::Display| Failure::Usage(err.to_string());
    let sources = usize::from(!args.node.is_empty())
        + usize::from(args.statefulset)
        + usize::from(args.lease.is_some());
    if sources != 1 {
        return Err(Failure::Usage(
            "give exactly one of --node (or ATOMFLAKE_NODE), --statefulset and --lease: \
             servers of one ID space must not share a node"
                .into(),
        ));
    }
    if let Some(url) = &args.lease {
        args.high_water.check_lease()?;
        if !(1..=layout.max_node() + 1).contains(&args.nodes) {
            return Err(Failure::Usage(format!(
                "--nodes {} is out of range: allowed 1..={}",
                args.nodes,
                layout.max_node() + 1
            )));
        }
        let (generator, watch) = leased(layout, url, &args.lease_options, args.nodes)?;
        return Ok((generator, Some(watch)));
    }
    let nodes = if args.statefulset {
        vec![atomflake::node::from_statefulset(&layout).map_err(|err| usage(&err))?]
    } else {
        args.node
            .iter()
            .map(|node| node_in(layout, node))
            .collect::<Result<Vec<_>, _>>()?
    };
    let generator = args.high_water.sharded(layout, &args.layout.layout, nodes)?;
    Ok((generator, None))
}

/// A generator on `count` nodes claimed from the lease engine of `url`, and the watch on
/// its lease.
pub(super) fn leased(
    layout: Layout,
    url: &str,
    options: &LeaseArgs,
    count: u64,
) -> Result<(ShardedGenerator, Arc<StoreWatch>), Failure> {
    let (nodes, store) = lease::acquire(layout, url, options, count)?;
    let listed = listed(nodes.iter().copied());
    tracing::info!(
        target: "atomflake serve",
        event = "claimed",
        nodes = %listed,
        namespace = %options.namespace,
        store = %store.describe(),
        "claimed node {listed} of lease namespace {:?}",
        options.namespace,
    );
    let (store, watch) = Watched::new(store);
    let generator = Builder::new(layout)
        .mark_store(store)
        .build_sharded(nodes)
        .map_err(|err| Failure::Other(err.to_string()))?;
    Ok((generator, watch))
}
