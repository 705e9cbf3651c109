//! `NativeLayout`, the ID text forms (decimal, 13 characters of sortable base32, 11 of
//! base62, and UUIDs of version 7) and `NativeMask`. IDs are `bigint`s, checked by
//! `index.js` to be in `0..=2^64-1`.

use crate::args;
use crate::errors::{range, thrown};
use atomflake::{Id, Layout, MaskKeyError, Parts};
use napi::bindgen_prelude::{BigInt, Uint8Array};
use napi_derive::napi;

/// The largest integer a JavaScript number holds exactly: 2^53 - 1.
const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// How bits of an ID are spent: timestamp, node and sequence widths, the epoch and the tick.
#[napi]
#[derive(Clone, Copy)]
pub struct NativeLayout(pub(crate) Layout);

/// An ID `index.js` checked: a `bigint` in `0..=2^64-1`.
pub(crate) fn id_of(id: &BigInt) -> napi::Result<u64> {
    match id.get_u64() {
        (false, value, true) => Ok(value),
        _ => Err(range("id is out of range: an id is 0..=18446744073709551615")),
    }
}

/// `value` as a JavaScript number, if it is one exactly.
pub(crate) fn number(value: u64, what: &str) -> napi::Result<f64> {
    if value > MAX_SAFE_INTEGER {
        return Err(range(format!(
            "{what} {value} is beyond JavaScript's exact integers (0..={MAX_SAFE_INTEGER})"
        )));
    }
    #[expect(clippy::cast_precision_loss, reason = "at most 2^53 - 1: exact")]
    Ok(value as f64)
}

/// A field width in bits.
fn width(value: f64, what: &str) -> napi::Result<u32> {
    args::unsigned(value, what, 64, "a field has 0..=64 bits")
        .map(|bits| u32::try_from(bits).unwrap_or(u32::MAX))
}

/// Unix ms.
fn ms(value: f64, what: &str) -> napi::Result<u64> {
    args::unsigned(
        value,
        what,
        MAX_SAFE_INTEGER,
        &format!("ms are 0..={MAX_SAFE_INTEGER}"),
    )
}

/// The fields of an ID.
#[napi(object)]
pub struct NativeParts {
    /// The Unix time of the ID's tick, in ms.
    pub unix_ms: f64,
    /// The node that minted it.
    pub node: f64,
    /// Its place in its tick.
    pub sequence: f64,
}

impl NativeLayout {
    /// The preset of that name, else a `RangeError` that lists the presets.
    pub(crate) fn preset_layout(name: &str) -> napi::Result<Layout> {
        Layout::preset_named(name).map_err(range)
    }
}

#[napi]
impl NativeLayout {
    /// A custom layout, checked: the three widths fit 64 bits, with a timestamp, and the
    /// tick is at least 1 ms.
    #[napi(constructor)]
    pub fn new(
        timestamp_bits: f64,
        node_bits: f64,
        sequence_bits: f64,
        epoch_ms: f64,
        tick_ms: f64,
    ) -> napi::Result<Self> {
        Layout::builder()
            .timestamp_bits(width(timestamp_bits, "timestampBits")?)
            .node_bits(width(node_bits, "nodeBits")?)
            .sequence_bits(width(sequence_bits, "sequenceBits")?)
            .epoch_ms(ms(epoch_ms, "epochMs")?)
            .tick_ms(ms(tick_ms, "tickMs")?)
            .build()
            .map(NativeLayout)
            .map_err(range)
    }

    /// The preset of that name.
    #[napi(factory)]
    pub fn preset(name: String) -> napi::Result<Self> {
        NativeLayout::preset_layout(&name).map(NativeLayout)
    }

    /// The presets' names, in order.
    #[napi]
    pub fn presets() -> Vec<&'static str> {
        Layout::PRESETS.iter().map(|(name, _)| *name).collect()
    }

    /// The preset's name, if this layout is one.
    #[napi(getter)]
    pub fn name(&self) -> Option<&'static str> {
        self.0.preset_name()
    }

    /// Bits of the timestamp.
    #[napi(getter)]
    pub fn timestamp_bits(&self) -> u32 {
        self.0.timestamp_bits()
    }

    /// Bits of the node.
    #[napi(getter)]
    pub fn node_bits(&self) -> u32 {
        self.0.node_bits()
    }

    /// Bits of the sequence.
    #[napi(getter)]
    pub fn sequence_bits(&self) -> u32 {
        self.0.sequence_bits()
    }

    /// The epoch, in Unix ms.
    #[napi(getter)]
    pub fn epoch_ms(&self) -> napi::Result<f64> {
        number(self.0.epoch_ms(), "epochMs")
    }

    /// The tick, in ms.
    #[napi(getter)]
    pub fn tick_ms(&self) -> napi::Result<f64> {
        number(self.0.tick_ms(), "tickMs")
    }

    /// The highest node.
    #[napi(getter)]
    pub fn max_node(&self) -> napi::Result<f64> {
        number(self.0.max_node(), "maxNode")
    }

    /// IDs one node mints per tick.
    #[napi(getter)]
    pub fn ids_per_tick(&self) -> BigInt {
        BigInt::from(self.0.ids_per_tick())
    }

    /// The largest ID.
    #[napi(getter)]
    pub fn max_id(&self) -> BigInt {
        BigInt::from(self.0.max_id())
    }

    /// Whether every ID of the layout is a JavaScript number exactly (at most 53 bits).
    #[napi(getter)]
    pub fn fits_js_number(&self) -> bool {
        self.0.fits_js_number()
    }

    /// The fields of `id`.
    #[napi]
    pub fn decode(&self, id: BigInt) -> napi::Result<NativeParts> {
        let parts = self.0.try_decode(Id::new(id_of(&id)?)).map_err(range)?;
        Ok(NativeParts {
            unix_ms: number(parts.unix_ms, "unixMs")?,
            node: number(parts.node, "node")?,
            sequence: number(parts.sequence, "sequence")?,
        })
    }

    /// The ID of these fields, each checked against the layout.
    #[napi]
    pub fn encode(&self, unix_ms: f64, node: f64, sequence: f64) -> napi::Result<u64> {
        let parts = Parts {
            unix_ms: ms(unix_ms, "unixMs")?,
            node: args::unsigned(node, "node", u64::MAX, "a node is 0..=18446744073709551615")?,
            sequence: args::unsigned(
                sequence,
                "sequence",
                u64::MAX,
                "a sequence is 0..=18446744073709551615",
            )?,
        };
        self.0.encode(parts).map(Id::get).map_err(range)
    }

    /// The first ID of the tick of `unix_ms`: for queries by time (`id >= firstIdAt(t)`).
    #[napi]
    pub fn first_id_at(&self, unix_ms: f64) -> napi::Result<u64> {
        self.0
            .first_id_at(ms(unix_ms, "unixMs")?)
            .map(Id::get)
            .map_err(range)
    }

    /// The last ID of the tick of `unix_ms`.
    #[napi]
    pub fn last_id_at(&self, unix_ms: f64) -> napi::Result<u64> {
        self.0
            .last_id_at(ms(unix_ms, "unixMs")?)
            .map(Id::get)
            .map_err(range)
    }

    /// The ID as the text of a UUID of version 7 (RFC 9562; lowercase, 8-4-4-4-12): its
    /// tick's start as the UUID's time, then the whole ID and the layout's fingerprint, so
    /// the UUIDs sort as the IDs do and `from_uuid` gives the ID back. A `RangeError` for
    /// an ID with bits outside the layout.
    #[napi]
    pub fn to_uuid(&self, id: BigInt) -> napi::Result<String> {
        let uuid = Id::new(id_of(&id)?).to_uuid(self.0).map_err(range)?;
        Ok(uuid.to_string())
    }

    /// The ID that a UUID's text from `to_uuid` holds (32 hex digits in either case, with or
    /// without hyphens, braces or `urn:uuid:`); a `RangeError` naming why any other text is
    /// not one of the layout's.
    #[napi]
    pub fn from_uuid(&self, text: String) -> napi::Result<u64> {
        Id::parse_uuid(&text, self.0)
            .map(Id::get)
            .map_err(|error| range(format!("invalid UUID {text:?}: {error}")))
    }

    /// The layout as `index.js` shows it: `Layout.TWITTER`, or its fields.
    #[napi]
    pub fn describe(&self) -> String {
        match self.name() {
            Some(name) => format!("Layout.{}", name.to_uppercase()),
            None => format!(
                "Layout {{ timestampBits: {}, nodeBits: {}, sequenceBits: {}, epochMs: {}, tickMs: {} }}",
                self.0.timestamp_bits(),
                self.0.node_bits(),
                self.0.sequence_bits(),
                self.0.epoch_ms(),
                self.0.tick_ms()
            ),
        }
    }

    /// Whether two layouts are the same.
    #[napi]
    pub fn equals(&self, other: &NativeLayout) -> bool {
        self.0 == other.0
    }
}

/// A keyed permutation of the IDs (Speck64/128, cycle-walked within each half of the
/// 64-bit numbers): `unmask(mask(id)) == id`, and an ID below 2^63 masks to one below 2^63.
/// The key is never shown.
#[napi]
pub struct NativeMask(atomflake::Mask);

#[napi]
impl NativeMask {
    /// A mask with a 16-byte key; a `RangeError` for another length.
    #[napi(constructor)]
    pub fn new(key: Uint8Array) -> napi::Result<Self> {
        <[u8; atomflake::MASK_KEY_BYTES]>::try_from(&key[..])
            .map(|bytes| NativeMask(atomflake::Mask::new(bytes)))
            .map_err(|_| range(format!("key has {} bytes: a key is 16 bytes", key.len())))
    }

    /// A mask with the key in a file of 16 raw bytes or 32 hex digits, readable by its
    /// owner alone. A file that cannot be read is an `AtomflakeError`; one that holds no
    /// key, or that others may read, a `RangeError`: each names the file.
    #[napi(factory)]
    pub fn from_key_file(path: String) -> napi::Result<Self> {
        atomflake::Mask::from_key_file(std::path::Path::new(&path))
            .map(NativeMask)
            .map_err(|error| match error {
                MaskKeyError::Read { .. } => thrown("AtomflakeError", false, None, &error),
                _ => range(error),
            })
    }

    /// The masked ID of `id`.
    #[napi]
    pub fn mask(&self, id: BigInt) -> napi::Result<u64> {
        Ok(self.0.mask(Id::new(id_of(&id)?)).get())
    }

    /// The ID whose masked ID is `masked`.
    #[napi]
    pub fn unmask(&self, masked: BigInt) -> napi::Result<u64> {
        Ok(self.0.unmask(Id::new(id_of(&masked)?)).get())
    }
}

/// An ID as 13 characters of Crockford base32, which sort as the IDs do.
#[napi]
pub fn to_base32(id: BigInt) -> napi::Result<String> {
    Ok(Id::new(id_of(&id)?).to_base32().to_string())
}

/// The ID of 13 characters of base32; a `RangeError` says what is wrong with the text.
#[napi]
pub fn from_base32(text: String) -> napi::Result<u64> {
    Id::from_base32(&text).map(Id::get).map_err(range)
}

/// An ID as 11 characters of base62 (`0-9A-Za-z`, in ASCII order), which sort as the IDs do.
#[napi]
pub fn to_base62(id: BigInt) -> napi::Result<String> {
    Ok(Id::new(id_of(&id)?).to_base62().to_string())
}

/// The ID of 11 characters of base62; a `RangeError` says what is wrong with the text.
#[napi]
pub fn from_base62(text: String) -> napi::Result<u64> {
    Id::from_base62(&text).map(Id::get).map_err(range)
}

/// The ID of decimal text; a `RangeError` says what is wrong with the text.
#[napi]
pub fn parse_id(text: String) -> napi::Result<u64> {
    text.parse::<Id>().map(Id::get).map_err(range)
}
