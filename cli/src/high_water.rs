//! The high-water files of fixed nodes (`--node`, `ATOMFLAKE_NODE`, `--statefulset`):
//! where they are kept, and the generators that keep them, for `mint` and `serve`.
//!
//! A fixed node keeps its mark in `DIR/LAYOUT-node-N.hw` (`twitter-node-1.hw`), one file
//! per layout and node, so that a node's mark is the same file whichever set of nodes it
//! is served with (`--node 1,2,3` today, `--node 2` tomorrow), and two processes on one
//! node of one layout are refused by the file's lock. `DIR` is `--high-water`, else
//! `ATOMFLAKE_HIGH_WATER`, else `$XDG_STATE_HOME/atomflake`, else
//! `$HOME/.local/state/atomflake`; it is created when missing.

use crate::Failure;
use atomflake::{BuildError, Builder, Layout, ShardedGenerator};
use clap::Args;
use std::path::{Path, PathBuf};

/// The environment variable that names the directory unless `--high-water` does.
const ENV: &str = "ATOMFLAKE_HIGH_WATER";

/// What `--no-high-water` risks, for its help and the errors that suggest it.
const RISK: &str = "a restart with the clock behind repeats IDs";

/// The high-water options of a fixed node, shared by `mint` and `serve`.
#[derive(Args)]
pub(crate) struct HighWaterArgs {
    /// The directory of the high-water files of fixed nodes (`--node`, `ATOMFLAKE_NODE`,
    /// `--statefulset`): one file per layout and node, `DIR/LAYOUT-node-N.hw`
    /// (`twitter-node-1.hw`), locked while a process mints on the node and kept ahead of
    /// its IDs, so that a restart starts past every ID the node handed out, even with its
    /// clock behind (it waits for its clock up to 10 s, and refuses to start further
    /// behind). Created when missing. Unless given: `ATOMFLAKE_HIGH_WATER`, else
    /// `$XDG_STATE_HOME/atomflake`, else `$HOME/.local/state/atomflake`. In a Kubernetes
    /// StatefulSet, put it on the pod's persistent volume (`--high-water
    /// /var/lib/atomflake`): the mark must follow the node. Not with `--lease` (the lease
    /// keeps the mark; `ATOMFLAKE_HIGH_WATER` is then ignored).
    #[arg(long, value_name = "DIR")]
    high_water: Option<PathBuf>,
    /// Keep no high-water file for a fixed node. The risk: a restart with the clock
    /// behind (NTP stepping it back at boot, a VM restored from a snapshot) repeats IDs
    /// handed out before it. Overrides `ATOMFLAKE_HIGH_WATER`; not with `--high-water` or
    /// `--lease`.
    #[arg(long, conflicts_with = "high_water")]
    no_high_water: bool,
}

impl HighWaterArgs {
    /// Refuses the options with `--lease`, whose lease keeps the mark.
    pub(crate) fn check_lease(&self) -> Result<(), Failure> {
        let given = if self.high_water.is_some() {
            "--high-water"
        } else if self.no_high_water {
            "--no-high-water"
        } else {
            return Ok(());
        };
        Err(Failure::Usage(format!(
            "{given} and --lease: the lease keeps the node's mark (ATOMFLAKE_HIGH_WATER is \
             ignored with a lease)"
        )))
    }

    /// The directory of the high-water files, or `None` with `--no-high-water`.
    fn dir(&self) -> Result<Option<PathBuf>, Failure> {
        if self.no_high_water {
            return Ok(None);
        }
        let set = |name: &str| std::env::var_os(name).filter(|value| !value.is_empty());
        if let Some(dir) = self.high_water.clone().or_else(|| set(ENV).map(PathBuf::from)) {
            return Ok(Some(dir));
        }
        // The XDG base directory specification: a relative XDG_STATE_HOME is ignored.
        let state_home = set("XDG_STATE_HOME")
            .map(PathBuf::from)
            .filter(|dir| dir.is_absolute())
            .or_else(|| set("HOME").map(|home| Path::new(&home).join(".local/state")));
        match state_home {
            Some(state_home) => Ok(Some(state_home.join("atomflake"))),
            None => Err(Failure::Usage(format!(
                "no directory for the high-water file of a fixed node: neither XDG_STATE_HOME \
                 nor HOME is set; pass --high-water DIR (or set {ENV}), or --no-high-water to \
                 accept that {RISK}"
            ))),
        }
    }

    /// A builder for generators of `layout` (preset `name`) on `nodes`, keeping their
    /// high-water files (the directory created when missing), or none with
    /// `--no-high-water`.
    fn builder(&self, layout: Layout, name: &str, nodes: &[u64]) -> Result<Builder, Failure> {
        let builder = Builder::new(layout);
        let Some(dir) = self.dir()? else {
            return Ok(builder);
        };
        std::fs::create_dir_all(&dir).map_err(|err| {
            Failure::Other(format!(
                "cannot create the high-water directory {}: {err}; {}",
                dir.display(),
                elsewhere()
            ))
        })?;
        Ok(builder.high_water_files(
            nodes
                .iter()
                .map(|node| dir.join(format!("{name}-node-{node}.hw"))),
        ))
    }

    /// The generator of `mint`: `node` of `layout` (preset `name`).
    pub(crate) fn generator(
        &self,
        layout: Layout,
        name: &str,
        node: u64,
    ) -> Result<atomflake::Generator, Failure> {
        self.builder(layout, name, &[node])?.build(node).map_err(failure)
    }

    /// The generator of `serve`: `nodes` of `layout` (preset `name`), one shard each.
    pub(crate) fn sharded(
        &self,
        layout: Layout,
        name: &str,
        nodes: Vec<u64>,
    ) -> Result<ShardedGenerator, Failure> {
        self.builder(layout, name, &nodes)?
            .build_sharded(nodes)
            .map_err(failure)
    }

    /// Where the marks are kept, for `serve`'s first line: `high-water files in DIR`, or
    /// what is risked without.
    pub(crate) fn describe(&self) -> String {
        match self.dir() {
            Ok(Some(dir)) => format!("high-water files in {}", dir.display()),
            _ => format!("no high-water file: {RISK}"),
        }
    }
}

/// The way out of a directory that cannot be used.
fn elsewhere() -> String {
    format!(
        "pass --high-water DIR (or set {ENV}) for a writable directory, or --no-high-water to \
         accept that {RISK}"
    )
}

/// A generator that could not be built as a [`Failure`]: bad nodes are bad input; a file
/// that cannot be used names itself, its path and the operating system's error.
fn failure(err: BuildError) -> Failure {
    match err {
        BuildError::NodeOutOfRange { .. } | BuildError::NoNodes | BuildError::DuplicateNode { .. } => {
            Failure::Usage(err.to_string())
        }
        BuildError::HighWater(atomflake::mark::HighWaterError::Locked { .. }) => Failure::Other(format!(
            "{err}: another process mints on this node of this layout now, and two would hand \
             out the same IDs"
        )),
        BuildError::HighWater(atomflake::mark::HighWaterError::Io { .. }) => {
            Failure::Other(format!("{err}; {}", elsewhere()))
        }
        err => Failure::Other(err.to_string()),
    }
}
