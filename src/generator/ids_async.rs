//! Async minting: the async twins of the core's waiting mints, on any runtime's timer
//! ([`Sleep`]), and the macro that writes their methods for each generator type
//! (`async_minting_methods!`, which `minting_methods!` in [`ids`](super::ids) calls).

use crate::clock::Clock;
use crate::format::id::Id;
use crate::generator::error::{FillError, MintError};
use crate::generator::ids::{Core, Shard, write_block};
use crate::generator::minter::Windowed;
use crate::generator::wait::{Sleep, Until};

impl<C: Clock> Core<C> {
    /// The next ID, waiting as `until` says on `sleep`'s timer.
    pub(crate) async fn next_id_until<W: Windowed, S: Sleep>(
        &self,
        node: &Shard<W>,
        until: Until,
        sleep: &S,
    ) -> Result<Id, MintError> {
        let (slot, _) = self
            .minter
            .reserve_async(&node.state, &self.clock, 1, until, sleep)
            .await?;
        Ok(node.packer.id(slot))
    }

    /// Fills `ids` a tick's block at a time, each block waiting as
    /// [`next_id_until`](Self::next_id_until) does, all by one `until`; a refusal stops
    /// it, with how many it filled.
    pub(crate) async fn fill_until<W: Windowed, S: Sleep>(
        &self,
        node: &Shard<W>,
        ids: &mut [Id],
        until: Until,
        sleep: &S,
    ) -> Result<(), FillError> {
        let len = ids.len();
        let mut rest = ids;
        while !rest.is_empty() {
            let want = rest.len() as u64;
            match self
                .minter
                .reserve_async(&node.state, &self.clock, want, until, sleep)
                .await
            {
                Ok(block) => rest = write_block(node.packer, self.minter.unit(), block, rest),
                Err(error) => return Err(FillError::new(len - rest.len(), error)),
            }
        }
        Ok(())
    }
}

/// The async methods of a generator type `$ty` whose node is `$node`, as
/// `minting_methods!` passes them.
macro_rules! async_minting_methods {
    ($ty:ident, node: |$self:ident| $node:expr, new: $new:literal) => {
        /// Async minting: waits without blocking the thread, on any runtime's timer
        /// ([`Sleep`](crate::Sleep)).
        impl<C: $crate::clock::Clock> $ty<C> {
            /// The next ID, waiting while the refusal is transient for as long as `until`
            /// says, on `sleep`'s timer, without blocking the thread: the async twin of
            /// [`next_id`](Self::next_id) ([`Until::Patient`](crate::Until::Patient)) and
            /// of [`next_id_timeout`](Self::next_id_timeout)
            /// ([`Until::timeout`](crate::Until::timeout)), by the same rules.
            ///
            /// A spent tick's wait sleeps on the timer when it is longer than twice the
            /// timer's [resolution](crate::Sleep::resolution) (a clock that moved back,
            /// long ticks), to within that of the tick; shorter ones yield to the runtime
            /// between clock reads, so that the task resumes within the next tick instead
            /// of a whole timer tick later. At saturation the task therefore keeps its
            /// thread busy while other tasks still run. A mark being stored is looked at
            /// again when its refusal says ([`MintError::retry_after`](crate::MintError::retry_after)).
            ///
            /// # Errors
            ///
            /// As [`next_id_timeout`](Self::next_id_timeout)'s with a deadline; with
            /// [`Until::Patient`](crate::Until::Patient), what
            /// [`next_id`](Self::next_id) panics with.
            pub async fn next_id_until<S: $crate::Sleep>(
                &$self,
                until: $crate::Until,
                sleep: &S,
            ) -> Result<$crate::Id, $crate::MintError> {
                $self.home.core.next_id_until($node, until, sleep).await
            }

            /// Fills `ids` a tick's block at a time, each block waiting as
            /// [`next_id_until`](Self::next_id_until) does, all by one `until`.
            ///
            /// # Errors
            ///
            /// As [`fill_timeout`](Self::fill_timeout)'s: how many IDs it filled, and the
            /// refusal that stopped it.
            pub async fn fill_until<S: $crate::Sleep>(
                &$self,
                ids: &mut [$crate::Id],
                until: $crate::Until,
                sleep: &S,
            ) -> Result<(), $crate::FillError> {
                $self.home.core.fill_until($node, ids, until, sleep).await
            }
        }

        /// Async minting on tokio (feature `tokio`).
        #[cfg(feature = "tokio")]
        impl<C: $crate::clock::Clock> $ty<C> {
            /// The next ID; while the current tick is spent, waits without blocking the
            /// runtime thread: [`next_id_until`](Self::next_id_until) with
            /// [`Until::Patient`](crate::Until::Patient) on tokio's timer
            /// ([`Tokio`](crate::Tokio)), which needs the runtime's time driver
            /// (`enable_time`) for waits of more than 2 ms.
            ///
            /// # Panics
            ///
            /// As [`next_id`](Self::next_id).
            ///
            /// # Examples
            ///
            /// ```
            #[doc = concat!("use atomflake::{Layout, ", stringify!($ty), "};")]
            ///
            /// let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build()?;
            #[doc = concat!("let generator = ", $new, "?;")]
            /// let (first, more) = runtime.block_on(async {
            ///     (generator.next_id_async().await, generator.next_ids_async(10_000).await)
            /// });
            /// assert!(more.iter().all(|&id| id > first));
            /// # Ok::<(), Box<dyn std::error::Error>>(())
            /// ```
            pub async fn next_id_async(&$self) -> $crate::Id {
                $self
                    .next_id_until($crate::Until::Patient, &$crate::Tokio)
                    .await
                    .unwrap_or_else(|error| panic!("atomflake: cannot mint an id: {error}"))
            }

            /// `n` IDs, reserved a tick at a time, waiting as
            /// [`next_id_async`](Self::next_id_async) does; one allocation for the whole
            /// `Vec`.
            ///
            /// # Panics
            ///
            /// As [`next_id`](Self::next_id).
            pub async fn next_ids_async(&$self, n: usize) -> Vec<$crate::Id> {
                let mut ids = vec![$crate::Id::new(0); n];
                $self.fill_async(&mut ids).await;
                ids
            }

            /// Fills `ids` with new IDs, reserved a tick at a time, waiting as
            /// [`next_id_async`](Self::next_id_async) does.
            ///
            /// # Panics
            ///
            /// As [`next_id`](Self::next_id).
            pub async fn fill_async(&$self, ids: &mut [$crate::Id]) {
                $self
                    .fill_until(ids, $crate::Until::Patient, &$crate::Tokio)
                    .await
                    .unwrap_or_else(|error| panic!("atomflake: cannot mint an id: {}", error.error()));
            }
        }
    };
}

pub(crate) use async_minting_methods;
