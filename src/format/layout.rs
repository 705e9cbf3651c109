//! [`Layout`]: how an ID's 64 bits are cut into timestamp, node and sequence.
//!
//! The timestamp is always the top field, so IDs sort by time. Below it come the node and
//! the sequence, in either order ([`FieldOrder`]):
//!
//! ```text
//!  63                                                             0
//! | 0… | timestamp (ticks since epoch) |   node   |   sequence    |   FieldOrder::NodeSequence
//! | 0… | timestamp (ticks since epoch) | sequence |     node      |   FieldOrder::SequenceNode
//! ```
//!
//! Bits above `timestamp + node + sequence` (Twitter's top bit) are always zero. Every shift
//! and mask is derived from the three widths; none is written down twice.

use super::error::{LayoutError, RangeError};
use crate::format::field::Field;
use crate::format::id::{Id, Parts};
use core::fmt;

/// The order of the two fields below the timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum FieldOrder {
    /// `timestamp | node | sequence`: Twitter, Discord, Instagram, Mastodon, JavaScript.
    #[default]
    NodeSequence,
    /// `timestamp | sequence | node`: Sonyflake.
    SequenceNode,
}

/// The cut of a 64-bit ID into fields, with the epoch and tick length of its timestamp.
///
/// Use a preset ([`Layout::TWITTER`], [`DISCORD`](Layout::DISCORD),
/// [`INSTAGRAM`](Layout::INSTAGRAM), [`SONYFLAKE`](Layout::SONYFLAKE),
/// [`MASTODON`](Layout::MASTODON), [`JAVASCRIPT`](Layout::JAVASCRIPT)) or build one with
/// [`Layout::builder`].
///
/// # Examples
///
/// ```
/// use atomflake::{Id, Layout, Parts};
///
/// // Twitter's documented example tweet (developer docs, Tweet object).
/// let parts = Layout::TWITTER.decode(Id::new(1050118621198921728));
/// assert_eq!(parts, Parts { unix_ms: 1539202764211, node: 347, sequence: 0 });
/// assert_eq!(Layout::TWITTER.encode(parts)?, Id::new(1050118621198921728));
/// # Ok::<(), atomflake::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Layout {
    timestamp_bits: u32,
    node_bits: u32,
    sequence_bits: u32,
    order: FieldOrder,
    epoch_ms: u64,
    tick_ms: u64,
}

/// `2^bits - 1`, for `bits` in `0..=64`.
const fn mask(bits: u32) -> u64 {
    if bits >= 64 { u64::MAX } else { (1 << bits) - 1 }
}

impl Layout {
    /// Twitter (X): 41-bit ms timestamp, 10-bit machine, 12-bit sequence, epoch
    /// 1288834974657 (2010-11-04T01:42:54.657Z). The top bit is always 0.
    pub const TWITTER: Layout = Layout::preset(41, 10, 12, FieldOrder::NodeSequence, 1_288_834_974_657, 1);

    /// Discord: 42-bit ms timestamp, 10-bit node (`worker << 5 | process`, 5 bits each),
    /// 12-bit sequence, epoch 1420070400000 (2015-01-01T00:00:00Z).
    pub const DISCORD: Layout = Layout::preset(42, 10, 12, FieldOrder::NodeSequence, 1_420_070_400_000, 1);

    /// Instagram: 41-bit ms timestamp, 13-bit shard, 10-bit sequence, epoch 1314220021721
    /// (from Instagram's published PL/pgSQL `next_id`). Uses all 64 bits, so IDs from late in
    /// its span are above `i64::MAX`.
    pub const INSTAGRAM: Layout = Layout::preset(41, 13, 10, FieldOrder::NodeSequence, 1_314_220_021_721, 1);

    /// Sonyflake: 39-bit timestamp in 10 ms ticks, 8-bit sequence, 16-bit machine, in the
    /// order `time | sequence | machine`, epoch 1409529600000 (2014-09-01T00:00:00Z).
    pub const SONYFLAKE: Layout = Layout::preset(39, 16, 8, FieldOrder::SequenceNode, 1_409_529_600_000, 10);

    /// Mastodon: 48-bit ms timestamp since the Unix epoch, 16-bit sequence, no node field.
    pub const MASTODON: Layout = Layout::preset(48, 0, 16, FieldOrder::NodeSequence, 0, 1);

    /// IDs a JavaScript number holds exactly: 38-bit timestamp in 10 ms ticks, 7-bit node,
    /// 8-bit sequence, epoch 1735689600000 (2025-01-01T00:00:00Z). 53 bits in all, so every
    /// ID of its span (until 2112-02-09) is at most [`Layout::JS_MAX_SAFE_INTEGER`]: 128
    /// nodes of 25,600 IDs/s each. The trade-off against the other cuts of 53 bits:
    /// [`atomflake::docs::formats`](crate::docs::formats#ids-a-javascript-number-holds-exactly).
    pub const JAVASCRIPT: Layout = Layout::preset(38, 7, 8, FieldOrder::NodeSequence, 1_735_689_600_000, 10);

    /// JavaScript's `Number.MAX_SAFE_INTEGER`, `2^53 - 1`: the largest integer from which
    /// every smaller one is an exact `double` (a JSON number, as a browser reads it).
    pub const JS_MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

    /// The presets with their names, for listings.
    pub const PRESETS: [(&'static str, Layout); 6] = [
        ("twitter", Layout::TWITTER),
        ("discord", Layout::DISCORD),
        ("instagram", Layout::INSTAGRAM),
        ("sonyflake", Layout::SONYFLAKE),
        ("mastodon", Layout::MASTODON),
        ("javascript", Layout::JAVASCRIPT),
    ];

    /// The preset named `name`, as [`Layout::PRESETS`] names them: `"twitter"`,
    /// `"discord"`, `"instagram"`, `"sonyflake"`, `"mastodon"` or `"javascript"`.
    ///
    /// # Errors
    ///
    /// [`LayoutError::UnknownPreset`] for any other name; its message lists the presets.
    ///
    /// # Examples
    ///
    /// ```
    /// use atomflake::{Layout, LayoutError};
    ///
    /// assert_eq!(Layout::preset_named("discord"), Ok(Layout::DISCORD));
    /// let error = Layout::preset_named("Twitter").unwrap_err();
    /// assert_eq!(error, LayoutError::UnknownPreset { name: "Twitter".into() });
    /// assert_eq!(
    ///     error.to_string(),
    ///     r#"unknown layout "Twitter": the presets are twitter, discord, instagram, sonyflake, mastodon, javascript"#,
    /// );
    /// ```
    pub fn preset_named(name: &str) -> Result<Layout, LayoutError> {
        Layout::PRESETS
            .iter()
            .find(|(preset, _)| *preset == name)
            .map(|&(_, layout)| layout)
            .ok_or_else(|| LayoutError::UnknownPreset {
                name: name.to_owned(),
            })
    }

    /// The name of the preset this layout is, if it is one of [`Layout::PRESETS`].
    ///
    /// # Examples
    ///
    /// ```
    /// use atomflake::Layout;
    ///
    /// assert_eq!(Layout::SONYFLAKE.preset_name(), Some("sonyflake"));
    /// let custom = Layout::builder().timestamp_bits(41).node_bits(12).sequence_bits(10).build()?;
    /// assert_eq!(custom.preset_name(), None);
    /// # Ok::<(), atomflake::LayoutError>(())
    /// ```
    pub fn preset_name(self) -> Option<&'static str> {
        Layout::PRESETS
            .iter()
            .find(|(_, preset)| *preset == self)
            .map(|(name, _)| *name)
    }

    const fn preset(
        timestamp_bits: u32,
        node_bits: u32,
        sequence_bits: u32,
        order: FieldOrder,
        epoch_ms: u64,
        tick_ms: u64,
    ) -> Layout {
        Layout {
            timestamp_bits,
            node_bits,
            sequence_bits,
            order,
            epoch_ms,
            tick_ms,
        }
    }

    /// Starts a custom layout. Every width starts at 0, the epoch at the Unix epoch, the tick
    /// at 1 ms and the order at [`FieldOrder::NodeSequence`].
    ///
    /// # Examples
    ///
    /// ```
    /// use atomflake::Layout;
    ///
    /// let wide = Layout::builder()
    ///     .timestamp_bits(41).node_bits(0).sequence_bits(22)
    ///     .epoch_ms(1288834974657).tick_ms(1)
    ///     .build()?;
    /// assert_eq!(wide.ids_per_tick(), 4_194_304);
    /// # Ok::<(), atomflake::Error>(())
    /// ```
    pub const fn builder() -> LayoutBuilder {
        LayoutBuilder {
            layout: Layout::preset(0, 0, 0, FieldOrder::NodeSequence, 0, 1),
        }
    }

    /// Checks the rules every layout keeps; the presets pass them too (tested).
    fn validate(self) -> Result<Layout, LayoutError> {
        let total =
            u64::from(self.timestamp_bits) + u64::from(self.node_bits) + u64::from(self.sequence_bits);
        if total > 64 {
            return Err(LayoutError::LayoutTooWide {
                timestamp_bits: self.timestamp_bits,
                node_bits: self.node_bits,
                sequence_bits: self.sequence_bits,
            });
        }
        if self.timestamp_bits == 0 {
            return Err(LayoutError::NoTimestampBits);
        }
        if self.tick_ms == 0 {
            return Err(LayoutError::ZeroTick);
        }
        // The span is 2^timestamp_bits ticks; its end must be a u64 of Unix ms.
        let end = 1u128
            .checked_shl(self.timestamp_bits)
            .map(|ticks| ticks * u128::from(self.tick_ms) + u128::from(self.epoch_ms));
        match end {
            Some(end) if end <= u128::from(u64::MAX) => Ok(self),
            _ => Err(LayoutError::SpanOverflow {
                epoch_ms: self.epoch_ms,
                tick_ms: self.tick_ms,
                timestamp_bits: self.timestamp_bits,
            }),
        }
    }

    /// Width of the timestamp field in bits.
    pub const fn timestamp_bits(&self) -> u32 {
        self.timestamp_bits
    }

    /// Width of the node field in bits (0 for Mastodon).
    pub const fn node_bits(&self) -> u32 {
        self.node_bits
    }

    /// Width of the sequence field in bits.
    pub const fn sequence_bits(&self) -> u32 {
        self.sequence_bits
    }

    /// Total width in bits; the bits above it are always 0.
    pub const fn total_bits(&self) -> u32 {
        self.timestamp_bits + self.node_bits + self.sequence_bits
    }

    /// The order of the node and sequence fields.
    pub const fn order(&self) -> FieldOrder {
        self.order
    }

    /// The Unix ms at which tick 0 starts.
    pub const fn epoch_ms(&self) -> u64 {
        self.epoch_ms
    }

    /// The length of one timestamp tick in ms (10 for Sonyflake, 1 for the others).
    pub const fn tick_ms(&self) -> u64 {
        self.tick_ms
    }

    /// The largest node ID (1023 for Twitter, 0 when there is no node field).
    pub const fn max_node(&self) -> u64 {
        mask(self.node_bits)
    }

    /// The largest sequence value.
    pub const fn max_sequence(&self) -> u64 {
        mask(self.sequence_bits)
    }

    /// How many IDs one generator can mint per tick: `2^sequence_bits` (4,096 for Twitter).
    pub const fn ids_per_tick(&self) -> u64 {
        1 << self.sequence_bits
    }

    /// The last tick the timestamp field holds.
    pub const fn max_tick(&self) -> u64 {
        mask(self.timestamp_bits)
    }

    /// The first Unix ms the layout cannot express: its timestamps run out here.
    ///
    /// ```
    /// use atomflake::Layout;
    /// // Twitter's 41 bits of ms run out in July 2080.
    /// assert_eq!(Layout::TWITTER.end_unix_ms(), 1288834974657 + (1 << 41));
    /// ```
    pub const fn end_unix_ms(&self) -> u64 {
        // Validated: cannot overflow (presets are checked by a test).
        self.epoch_ms + (self.max_tick() + 1) * self.tick_ms
    }

    /// The last tick whose IDs all fit an `i64` (a signed `BIGINT`): the last tick for
    /// layouts of at most 63 bits.
    pub const fn last_i64_tick(&self) -> u64 {
        let fits = (i64::MAX as u64) >> self.timestamp_shift();
        if fits < self.max_tick() {
            fits
        } else {
            self.max_tick()
        }
    }

    /// The first Unix ms whose IDs no longer fit an `i64`: a signed `BIGINT` column holds
    /// every ID minted before it. For layouts of at most 63 bits this is
    /// [`end_unix_ms`](Self::end_unix_ms).
    ///
    /// | preset | IDs pass `i64::MAX` |
    /// |---|---|
    /// | Twitter | never (63 bits; the span ends 2080-07-10) |
    /// | Discord | 2084-09-06 |
    /// | Instagram | 2046-06-27 |
    /// | Sonyflake | never (63 bits; the span ends 2188-11-16) |
    /// | Mastodon | 6429-10-17 |
    /// | JavaScript | never (53 bits; the span ends 2112-02-09) |
    ///
    /// ```
    /// use atomflake::Layout;
    /// // Instagram uses all 64 bits: its IDs pass i64::MAX on 2046-06-27.
    /// assert_eq!(Layout::INSTAGRAM.i64_end_unix_ms(), 1314220021721 + (1 << 40));
    /// assert_eq!(Layout::TWITTER.i64_end_unix_ms(), Layout::TWITTER.end_unix_ms());
    /// ```
    pub const fn i64_end_unix_ms(&self) -> u64 {
        // Validated: cannot overflow, as end_unix_ms.
        self.epoch_ms + (self.last_i64_tick() + 1) * self.tick_ms
    }

    /// The largest raw ID of this layout (all field bits set).
    pub const fn max_id(&self) -> u64 {
        mask(self.total_bits())
    }

    /// Whether every ID of the layout, over its whole span, is at most
    /// [`Layout::JS_MAX_SAFE_INTEGER`]: a JavaScript number (a JSON number read by a
    /// browser) holds each exactly. True for layouts of at most 53 bits.
    ///
    /// ```
    /// use atomflake::Layout;
    /// assert!(Layout::JAVASCRIPT.fits_js_number());
    /// assert_eq!(Layout::JAVASCRIPT.max_id(), Layout::JS_MAX_SAFE_INTEGER);
    /// assert!(!Layout::TWITTER.fits_js_number());
    /// ```
    pub const fn fits_js_number(&self) -> bool {
        self.max_id() <= Layout::JS_MAX_SAFE_INTEGER
    }

    /// Bit offset of the timestamp field: where it starts, counted from the lowest bit.
    ///
    /// # Examples
    ///
    /// ```
    /// use atomflake::Layout;
    ///
    /// assert_eq!(Layout::TWITTER.timestamp_shift(), 22);
    /// assert_eq!(Layout::TWITTER.node_shift(), 12);
    /// assert_eq!(Layout::TWITTER.sequence_shift(), 0);
    /// assert_eq!(Layout::SONYFLAKE.node_shift(), 0); // time | sequence | machine
    /// ```
    pub const fn timestamp_shift(&self) -> u32 {
        self.node_bits + self.sequence_bits
    }

    /// Bit offset of the node field: where it starts, counted from the lowest bit.
    pub const fn node_shift(&self) -> u32 {
        match self.order {
            FieldOrder::NodeSequence => self.sequence_bits,
            FieldOrder::SequenceNode => 0,
        }
    }

    /// Bit offset of the sequence field: where it starts, counted from the lowest bit.
    pub const fn sequence_shift(&self) -> u32 {
        match self.order {
            FieldOrder::NodeSequence => 0,
            FieldOrder::SequenceNode => self.node_bits,
        }
    }

    /// The tick that contains `unix_ms`.
    ///
    /// # Errors
    ///
    /// [`RangeError::TimeBeforeEpoch`] and [`RangeError::TimePastEnd`] for times outside the span.
    #[inline]
    pub fn tick_at(&self, unix_ms: u64) -> Result<u64, RangeError> {
        Ok(self.span().tick_at(unix_ms)?)
    }

    /// The numbers [`tick_at`](Self::tick_at) needs, computed once, for a generator to keep.
    pub(crate) const fn span(&self) -> Span {
        Span {
            epoch_ms: self.epoch_ms,
            tick_ms: match core::num::NonZeroU64::new(self.tick_ms) {
                Some(tick_ms) => tick_ms,
                // A built layout's tick is at least 1 ms (`validate`).
                None => core::num::NonZeroU64::MIN,
            },
            last_ms_since_epoch: self.end_unix_ms() - self.epoch_ms - 1,
            end_ms: self.end_unix_ms(),
        }
    }

    /// The Unix ms at which `tick` starts (saturating at `u64::MAX` for ticks outside the
    /// span, which only out-of-layout IDs carry).
    pub(crate) const fn unix_ms_of_tick(&self, tick: u64) -> u64 {
        tick.saturating_mul(self.tick_ms).saturating_add(self.epoch_ms)
    }

    /// The smallest ID of the tick that contains `unix_ms`: every field below the timestamp
    /// is 0.
    ///
    /// With [`last_id_at`](Self::last_id_at) it turns a time range into an ID range, for
    /// paging through rows by creation time with `WHERE id BETWEEN a AND b ORDER BY id`:
    /// `first_id_at(t1)..=last_id_at(t2)` holds every ID (of any node) whose tick overlaps
    /// `[t1, t2]`. A `t1` in the middle of a tick includes that whole tick: an ID keeps only
    /// its tick, so IDs from its first milliseconds cannot be told apart from the rest.
    ///
    /// # Errors
    ///
    /// [`RangeError::TimeBeforeEpoch`] and [`RangeError::TimePastEnd`] for times outside the span,
    /// as [`tick_at`](Self::tick_at).
    ///
    /// # Examples
    ///
    /// ```
    /// use atomflake::{Id, Layout};
    /// use std::time::{Duration, UNIX_EPOCH};
    ///
    /// let layout = Layout::TWITTER;
    /// // 2018-10-10T20:19:24.211Z, as Unix ms; from a SystemTime:
    /// let t = UNIX_EPOCH + Duration::from_millis(1539202764211);
    /// let ms = u64::try_from(t.duration_since(UNIX_EPOCH)?.as_millis())?;
    /// let (first, last) = (layout.first_id_at(ms)?, layout.last_id_at(ms)?);
    /// // Twitter's documented tweet 1050118621198921728 was created in that millisecond.
    /// assert!((first..=last).contains(&Id::new(1050118621198921728)));
    /// assert_eq!(last.get() - first.get(), (1 << 22) - 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn first_id_at(&self, unix_ms: u64) -> Result<Id, RangeError> {
        Ok(Id::new(self.tick_at(unix_ms)? << self.timestamp_shift()))
    }

    /// The largest ID of the tick that contains `unix_ms`: every field below the timestamp
    /// has all its bits set. See [`first_id_at`](Self::first_id_at).
    ///
    /// # Errors
    ///
    /// [`RangeError::TimeBeforeEpoch`] and [`RangeError::TimePastEnd`] for times outside the span.
    ///
    /// ```
    /// use atomflake::{Layout, LayoutError, RangeError};
    ///
    /// let layout = Layout::SONYFLAKE; // 10 ms ticks
    /// let epoch = layout.epoch_ms();
    /// // epoch + 19 ms is in tick 1: sequence and machine bits all 0, then all 1.
    /// assert_eq!(layout.first_id_at(epoch + 19)?.get(), 1 << 24);
    /// assert_eq!(layout.last_id_at(epoch + 19)?.get(), (2 << 24) - 1);
    /// assert_eq!(
    ///     layout.last_id_at(epoch - 1),
    ///     Err(RangeError::TimeBeforeEpoch { unix_ms: epoch - 1, epoch_ms: epoch }),
    /// );
    /// # Ok::<(), atomflake::Error>(())
    /// ```
    pub fn last_id_at(&self, unix_ms: u64) -> Result<Id, RangeError> {
        Ok(Id::new(
            self.first_id_at(unix_ms)?.get() | mask(self.timestamp_shift()),
        ))
    }

    /// Puts the fields together into an ID. A time inside a tick stands for that tick (for
    /// Sonyflake's 10 ms ticks, `unix_ms` 5 ms into a tick encodes as the tick's start).
    ///
    /// # Errors
    ///
    /// [`RangeError::FieldOutOfRange`] for a node or sequence that does not fit its field,
    /// [`RangeError::TimeBeforeEpoch`] and [`RangeError::TimePastEnd`] for a time outside the span.
    /// Nothing is ever masked or wrapped.
    ///
    /// # Examples
    ///
    /// ```
    /// use atomflake::{Field, Layout, Parts, RangeError};
    ///
    /// let parts = Parts { unix_ms: 1462015105796, node: 32, sequence: 7 };
    /// assert_eq!(Layout::DISCORD.encode(parts)?.get(), 175928847299117063);
    ///
    /// let too_big = Parts { sequence: 4096, ..parts };
    /// assert_eq!(
    ///     Layout::DISCORD.encode(too_big),
    ///     Err(RangeError::FieldOutOfRange { field: Field::Sequence, value: 4096, max: 4095 }),
    /// );
    /// # Ok::<(), atomflake::Error>(())
    /// ```
    pub fn encode(&self, parts: Parts) -> Result<Id, RangeError> {
        check_field(Field::Node, parts.node, self.max_node())?;
        check_field(Field::Sequence, parts.sequence, self.max_sequence())?;
        let tick = self.tick_at(parts.unix_ms)?;
        Ok(Id::new(
            tick << self.timestamp_shift()
                | parts.node << self.node_shift()
                | parts.sequence << self.sequence_shift(),
        ))
    }

    /// Takes an ID apart. `unix_ms` is the start of the ID's tick.
    ///
    /// Any `u64` decodes: bits above the layout's width count as timestamp bits, so nothing
    /// is dropped and a foreign ID shows up as a time past [`end_unix_ms`](Self::end_unix_ms)
    /// (saturating at `u64::MAX`). Use [`try_decode`](Self::try_decode) to reject such IDs.
    ///
    /// # Examples
    ///
    /// ```
    /// use atomflake::{Id, Layout};
    ///
    /// let parts = Layout::DISCORD.decode(Id::new(175928847299117063));
    /// assert_eq!((parts.unix_ms, parts.node >> 5, parts.node & 31, parts.sequence), (1462015105796, 1, 0, 7));
    /// ```
    pub const fn decode(&self, id: Id) -> Parts {
        let raw = id.get();
        Parts {
            unix_ms: self.unix_ms_of_tick(raw >> self.timestamp_shift()),
            node: (raw >> self.node_shift()) & self.max_node(),
            sequence: (raw >> self.sequence_shift()) & self.max_sequence(),
        }
    }

    /// Like [`decode`](Self::decode), but refuses IDs with bits set above the layout's width.
    ///
    /// # Errors
    ///
    /// [`RangeError::IdOutOfLayout`] naming the ID and [`max_id`](Self::max_id).
    ///
    /// ```
    /// use atomflake::{Id, Layout, RangeError};
    ///
    /// let foreign = Id::new(u64::MAX);
    /// assert_eq!(
    ///     Layout::TWITTER.try_decode(foreign),
    ///     Err(RangeError::IdOutOfLayout { id: u64::MAX, max: i64::MAX as u64 }),
    /// );
    /// ```
    pub const fn try_decode(&self, id: Id) -> Result<Parts, RangeError> {
        if id.get() > self.max_id() {
            return Err(RangeError::IdOutOfLayout {
                id: id.get(),
                max: self.max_id(),
            });
        }
        Ok(self.decode(id))
    }
}

/// A layout's timestamp span, precomputed for the minting path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    epoch_ms: u64,
    /// Never 0 (a layout's tick is at least 1 ms): the division needs no check.
    tick_ms: core::num::NonZeroU64,
    /// `end_ms - epoch_ms - 1`: the last ms of the span, counted from the epoch.
    last_ms_since_epoch: u64,
    end_ms: u64,
}

impl Span {
    /// See [`Layout::tick_at`].
    #[inline]
    pub(crate) fn tick_at(self, unix_ms: u64) -> Result<u64, OutOfSpan> {
        // One comparison checks both ends: a time before the epoch wraps to a huge value.
        let since_epoch = unix_ms.wrapping_sub(self.epoch_ms);
        if since_epoch > self.last_ms_since_epoch {
            return Err(self.out_of_span(unix_ms));
        }
        // Most layouts tick in milliseconds: skip the division for them.
        Ok(if self.tick_ms.get() == 1 {
            since_epoch
        } else {
            since_epoch / self.tick_ms
        })
    }

    #[cold]
    fn out_of_span(self, unix_ms: u64) -> OutOfSpan {
        if unix_ms < self.epoch_ms {
            OutOfSpan::Before {
                unix_ms,
                epoch_ms: self.epoch_ms,
            }
        } else {
            OutOfSpan::Past {
                unix_ms,
                end_ms: self.end_ms,
            }
        }
    }
}

/// A node value that does not fit the node field: what the packing of IDs checks, turned
/// into each operation's own error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FieldOutOfRange {
    pub(crate) field: Field,
    pub(crate) value: u64,
    pub(crate) max: u64,
}

impl From<FieldOutOfRange> for RangeError {
    fn from(FieldOutOfRange { field, value, max }: FieldOutOfRange) -> RangeError {
        RangeError::FieldOutOfRange { field, value, max }
    }
}

/// A time outside a layout's span: what the clock check of minting and of the time
/// conversions finds, turned into each operation's own error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OutOfSpan {
    Before { unix_ms: u64, epoch_ms: u64 },
    Past { unix_ms: u64, end_ms: u64 },
}

impl From<OutOfSpan> for RangeError {
    fn from(out: OutOfSpan) -> RangeError {
        match out {
            OutOfSpan::Before { unix_ms, epoch_ms } => RangeError::TimeBeforeEpoch { unix_ms, epoch_ms },
            OutOfSpan::Past { unix_ms, end_ms } => RangeError::TimePastEnd { unix_ms, end_ms },
        }
    }
}

pub(crate) fn check_field(field: Field, value: u64, max: u64) -> Result<(), FieldOutOfRange> {
    if value > max {
        return Err(FieldOutOfRange { field, value, max });
    }
    Ok(())
}

impl fmt::Display for Layout {
    /// `41/10/12 bits, 1 ms ticks, epoch 1288834974657 ms` (`41/12/8 …, time|sequence|node`
    /// for the other order).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (second, third) = match self.order {
            FieldOrder::NodeSequence => (self.node_bits, self.sequence_bits),
            FieldOrder::SequenceNode => (self.sequence_bits, self.node_bits),
        };
        write!(
            f,
            "{}/{second}/{third} bits, {} ms ticks, epoch {} ms",
            self.timestamp_bits, self.tick_ms, self.epoch_ms
        )?;
        if self.order == FieldOrder::SequenceNode {
            f.write_str(", time|sequence|node")?;
        }
        Ok(())
    }
}

/// Builds a custom [`Layout`]; see [`Layout::builder`].
///
/// Any widths with a timestamp of at least 1 bit and at most 64 bits in all, any epoch, any
/// tick of at least 1 ms, either field order.
///
/// A **0-bit sequence is allowed**: it means one ID per tick per node, which is a real
/// (if slow) scheme, and the generator's state word needs no special case for it (the
/// "next free slot" is then just the next tick). A 0-bit node field is allowed too
/// (Mastodon). A 0-bit timestamp is not: every ID would carry the same time and the
/// generator could mint only `2^sequence_bits` IDs, ever.
#[derive(Debug, Clone, Copy)]
#[must_use = "a builder does nothing until build() is called"]
pub struct LayoutBuilder {
    layout: Layout,
}

/// One consuming setter per field of the layout being built.
macro_rules! setters {
    ($($(#[$doc:meta])* $field:ident: $ty:ty,)*) => {
        $(
            $(#[$doc])*
            pub const fn $field(mut self, $field: $ty) -> Self {
                self.layout.$field = $field;
                self
            }
        )*
    };
}

impl LayoutBuilder {
    setters! {
        /// Width of the timestamp field; at least 1.
        timestamp_bits: u32,
        /// Width of the node field; may be 0.
        node_bits: u32,
        /// Width of the sequence field; may be 0 (one ID per tick).
        sequence_bits: u32,
        /// The Unix ms at which tick 0 starts.
        epoch_ms: u64,
        /// The tick length in ms; at least 1.
        tick_ms: u64,
        /// The order of the node and sequence fields.
        order: FieldOrder,
    }

    /// Checks the layout and returns it.
    ///
    /// # Errors
    ///
    /// [`LayoutError::LayoutTooWide`] when the widths add up to more than 64,
    /// [`LayoutError::NoTimestampBits`] for a 0-bit timestamp, [`LayoutError::ZeroTick`] for a 0 ms tick,
    /// [`LayoutError::SpanOverflow`] when `epoch + 2^timestamp_bits * tick` passes `u64::MAX` ms.
    ///
    /// ```
    /// use atomflake::{Layout, LayoutError, RangeError};
    ///
    /// let err = Layout::builder().timestamp_bits(42).node_bits(12).sequence_bits(12).build();
    /// assert_eq!(err, Err(LayoutError::LayoutTooWide { timestamp_bits: 42, node_bits: 12, sequence_bits: 12 }));
    /// ```
    pub fn build(self) -> Result<Layout, LayoutError> {
        self.layout.validate()
    }
}

#[cfg(test)]
mod tests;
