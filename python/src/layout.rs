//! `Layout` and `Parts`, and the ID text forms: decimal and 13 characters of sortable
//! base32. IDs are Python `int`s.

use crate::args;
use atomflake::{Id, Layout, Parts};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{IntoPyDict, PyDict};

/// How bits of an ID are spent: timestamp, node and sequence widths, the epoch and the tick.
#[pyclass(frozen, eq, hash, module = "atomflake", name = "Layout")]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct PyLayout(pub(crate) Layout);

/// What `Layout.encode` takes, as its `TypeError`s name it.
const ENCODE_FORMS: &str =
    "a Parts (as decode returns) or the keywords unix_ms and node (and sequence, 0 unless given)";

/// A tick length in ms.
fn tick_ms_arg(value: &Bound<'_, PyAny>) -> PyResult<u64> {
    args::unsigned(value, "tick_ms", u64::MAX, "ms are 0..=18446744073709551615")
}

/// A sequence value; the layout checks its range.
fn sequence_arg(value: &Bound<'_, PyAny>) -> PyResult<u64> {
    args::unsigned(
        value,
        "sequence",
        u64::MAX,
        "a sequence is 0..=18446744073709551615",
    )
}

/// The first Unix ms of a `datetime` (aware) or an `int` of Unix ms.
fn unix_ms(when: &Bound<'_, PyAny>) -> PyResult<u64> {
    if when.is_instance_of::<pyo3::types::PyInt>() {
        return args::unsigned(when, "unix_ms", u64::MAX, "Unix ms are 0..=18446744073709551615");
    }
    let py = when.py();
    if when.call_method0("utcoffset")?.is_none() {
        return Err(PyValueError::new_err(format!(
            "datetime {} has no time zone: give it a tzinfo (datetime.timezone.utc, say)",
            when.str()?
        )));
    }
    let datetime = py.import("datetime")?;
    let since = when.sub(unix_epoch(py)?)?;
    let ms = since.floor_div(
        datetime
            .getattr("timedelta")?
            .call((), Some(&[("milliseconds", 1)].into_py_dict(py)?))?,
    )?;
    args::unsigned(
        &ms,
        "unix_ms of datetime",
        u64::MAX,
        "a datetime at or after 1970-01-01T00:00:00Z",
    )
}

/// 1970-01-01T00:00:00Z as a `datetime`.
fn unix_epoch(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    let datetime = py.import("datetime")?;
    let utc = datetime.getattr("timezone")?.getattr("utc")?;
    datetime.getattr("datetime")?.call1((1970, 1, 1, 0, 0, 0, 0, utc))
}

/// Unix ms as an aware `datetime` in UTC.
pub(crate) fn datetime_of(py: Python<'_>, unix_ms: u64) -> PyResult<Bound<'_, PyAny>> {
    let timedelta = py.import("datetime")?.getattr("timedelta")?;
    let since = timedelta.call((), Some(&[("milliseconds", unix_ms)].into_py_dict(py)?))?;
    unix_epoch(py)?.add(since)
}

impl PyLayout {
    /// The preset of that name, else a `ValueError` that lists the presets.
    pub(crate) fn preset_layout(name: &str) -> PyResult<Layout> {
        Layout::preset_named(name).map_err(|error| PyValueError::new_err(error.to_string()))
    }
}

#[pymethods]
impl PyLayout {
    /// A custom layout, checked: the three widths fit 64 bits, with a timestamp, and the
    /// tick is at least 1 ms.
    #[new]
    #[pyo3(signature = (*, timestamp_bits, node_bits, sequence_bits, epoch_ms, tick_ms = 1))]
    fn new(
        timestamp_bits: &Bound<'_, PyAny>,
        node_bits: &Bound<'_, PyAny>,
        sequence_bits: &Bound<'_, PyAny>,
        epoch_ms: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = tick_ms_arg)] tick_ms: u64,
    ) -> PyResult<Self> {
        let width = |value, what| {
            args::unsigned(value, what, 64, "a field has 0..=64 bits")
                .map(|bits| u32::try_from(bits).unwrap_or(u32::MAX))
        };
        let ms = |value, what| args::unsigned(value, what, u64::MAX, "ms are 0..=18446744073709551615");
        Layout::builder()
            .timestamp_bits(width(timestamp_bits, "timestamp_bits")?)
            .node_bits(width(node_bits, "node_bits")?)
            .sequence_bits(width(sequence_bits, "sequence_bits")?)
            .epoch_ms(ms(epoch_ms, "epoch_ms")?)
            .tick_ms(tick_ms)
            .build()
            .map(PyLayout)
            .map_err(|error| PyValueError::new_err(error.to_string()))
    }

    /// The preset of that name: "twitter", "discord", "instagram", "sonyflake", "mastodon"
    /// or "javascript".
    #[staticmethod]
    fn preset(name: &str) -> PyResult<Self> {
        PyLayout::preset_layout(name).map(PyLayout)
    }

    /// Every preset by name.
    #[staticmethod]
    fn presets(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
        let presets = PyDict::new(py);
        for (name, layout) in Layout::PRESETS {
            presets.set_item(name, PyLayout(layout))?;
        }
        Ok(presets)
    }

    #[classattr]
    const TWITTER: PyLayout = PyLayout(Layout::TWITTER);
    #[classattr]
    const DISCORD: PyLayout = PyLayout(Layout::DISCORD);
    #[classattr]
    const INSTAGRAM: PyLayout = PyLayout(Layout::INSTAGRAM);
    #[classattr]
    const SONYFLAKE: PyLayout = PyLayout(Layout::SONYFLAKE);
    #[classattr]
    const MASTODON: PyLayout = PyLayout(Layout::MASTODON);
    #[classattr]
    const JAVASCRIPT: PyLayout = PyLayout(Layout::JAVASCRIPT);

    /// Bits of the timestamp field.
    #[getter]
    fn timestamp_bits(&self) -> u32 {
        self.0.timestamp_bits()
    }
    /// Bits of the node field.
    #[getter]
    fn node_bits(&self) -> u32 {
        self.0.node_bits()
    }
    /// Bits of the sequence field.
    #[getter]
    fn sequence_bits(&self) -> u32 {
        self.0.sequence_bits()
    }
    /// The epoch, Unix ms.
    #[getter]
    fn epoch_ms(&self) -> u64 {
        self.0.epoch_ms()
    }
    /// Milliseconds per tick.
    #[getter]
    fn tick_ms(&self) -> u64 {
        self.0.tick_ms()
    }
    /// The highest node.
    #[getter]
    fn max_node(&self) -> u64 {
        self.0.max_node()
    }
    /// IDs one node mints per tick.
    #[getter]
    fn ids_per_tick(&self) -> u64 {
        self.0.ids_per_tick()
    }
    /// The first Unix ms the layout cannot express.
    #[getter]
    fn end_unix_ms(&self) -> u64 {
        self.0.end_unix_ms()
    }
    /// The highest ID of the layout.
    #[getter]
    fn max_id(&self) -> u64 {
        self.0.max_id()
    }
    /// Whether every ID of the layout is at most 2**53 - 1, JavaScript's
    /// `Number.MAX_SAFE_INTEGER`: a JSON number read by a browser holds it exactly.
    #[getter]
    fn fits_js_number(&self) -> bool {
        self.0.fits_js_number()
    }

    /// An ID's parts; a `ValueError` for an ID with bits outside the layout.
    fn decode(&self, id: &Bound<'_, PyAny>) -> PyResult<PyParts> {
        self.0
            .try_decode(Id::new(args::id(id)?))
            .map(PyParts)
            .map_err(|error| PyValueError::new_err(error.to_string()))
    }

    /// The ID of these parts: a `Parts` (as `decode` returns), or the keywords `unix_ms`
    /// (an aware `datetime` or Unix ms), `node` and `sequence` (0 unless given). A
    /// `ValueError` names a part out of range; a `TypeError` anything but those two forms.
    // The signature Python shows (`inspect`, stubtest) marks the arguments that may be left
    // out with `...`, not None, which none of them is documented to take: `sequence` is 0
    // when left out beside the keywords, and is left out beside a `Parts`.
    #[pyo3(
        signature = (parts = None, /, *, unix_ms = None, node = None, sequence = None),
        text_signature = "($self, parts=..., /, *, unix_ms=..., node=..., sequence=...)"
    )]
    fn encode(
        &self,
        parts: Option<&Bound<'_, PyAny>>,
        unix_ms: Option<&Bound<'_, PyAny>>,
        node: Option<&Bound<'_, PyAny>>,
        sequence: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<u64> {
        let parts = match (parts, unix_ms, node) {
            (Some(parts), None, None) if sequence.is_none() => match parts.cast::<PyParts>() {
                Ok(parts) => parts.get().0,
                Err(_) => {
                    return Err(PyTypeError::new_err(format!(
                        "Layout.encode() takes {ENCODE_FORMS}, not {} ({})",
                        parts.repr()?,
                        parts.get_type().name()?
                    )));
                }
            },
            (Some(parts), ..) => {
                let keywords: Vec<&str> = [("unix_ms", unix_ms), ("node", node), ("sequence", sequence)]
                    .into_iter()
                    .filter_map(|(name, value)| value.map(|_| name))
                    .collect();
                return Err(PyTypeError::new_err(format!(
                    "Layout.encode() takes {ENCODE_FORMS}, not both: {} and {}",
                    parts.repr()?,
                    keywords.join(", ")
                )));
            }
            (None, Some(unix_ms), Some(node)) => Parts {
                unix_ms: self::unix_ms(unix_ms)?,
                node: args::unsigned(
                    node,
                    "node",
                    u64::MAX,
                    &format!("the layout allows 0..={}", self.0.max_node()),
                )?,
                sequence: sequence.map_or(Ok(0), sequence_arg)?,
            },
            (None, unix_ms, _) => {
                let missing = if unix_ms.is_some() {
                    "node"
                } else if node.is_some() {
                    "unix_ms"
                } else {
                    "unix_ms and node"
                };
                return Err(PyTypeError::new_err(format!(
                    "Layout.encode() is missing {missing}: it takes {ENCODE_FORMS}"
                )));
            }
        };
        self.0
            .encode(parts)
            .map(Id::get)
            .map_err(|error| PyValueError::new_err(error.to_string()))
    }

    /// The ID as a `uuid.UUID` of version 7 (RFC 9562): its tick's start as the UUID's
    /// time, then the whole ID and the layout's fingerprint, so the UUIDs sort as the IDs
    /// do and `from_uuid` gives the ID back. A `ValueError` for an ID with bits outside the
    /// layout.
    #[pyo3(name = "to_uuid")]
    fn uuid_of<'py>(&self, id: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let uuid = Id::new(args::id(id)?)
            .to_uuid_u128(self.0)
            .map_err(|error| PyValueError::new_err(error.to_string()))?;
        let py = id.py();
        py.import("uuid")?
            .getattr("UUID")?
            .call((), Some(&[("int", uuid)].into_py_dict(py)?))
    }

    /// The ID that a `uuid.UUID` from `to_uuid` holds; a `ValueError` naming why any other
    /// UUID is not one of the layout's, a `TypeError` for anything but a `uuid.UUID`.
    #[pyo3(name = "from_uuid")]
    fn id_of_uuid(&self, uuid: &Bound<'_, PyAny>) -> PyResult<u64> {
        let py = uuid.py();
        if !uuid.is_instance(&py.import("uuid")?.getattr("UUID")?)? {
            return Err(PyTypeError::new_err(format!(
                "Layout.from_uuid() takes a uuid.UUID, not {} ({})",
                uuid.repr()?,
                uuid.get_type().name()?
            )));
        }
        Id::from_uuid_u128(uuid.getattr("int")?.extract()?, self.0)
            .map(Id::get)
            .map_err(|error| PyValueError::new_err(format!("uuid {uuid} is not an id's: {error}")))
    }

    /// The start of an ID's tick as an aware `datetime` in UTC.
    fn datetime<'py>(&self, id: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let parts = self.decode(id)?;
        datetime_of(id.py(), parts.0.unix_ms)
    }

    /// The lowest ID of the tick holding `when` (an aware `datetime` or Unix ms): every ID
    /// minted at or after `when` is at least this. For range queries.
    fn first_id_at(&self, when: &Bound<'_, PyAny>) -> PyResult<u64> {
        self.0
            .first_id_at(unix_ms(when)?)
            .map(Id::get)
            .map_err(|error| PyValueError::new_err(error.to_string()))
    }

    /// The highest ID of the tick holding `when` (an aware `datetime` or Unix ms).
    fn last_id_at(&self, when: &Bound<'_, PyAny>) -> PyResult<u64> {
        self.0
            .last_id_at(unix_ms(when)?)
            .map(Id::get)
            .map_err(|error| PyValueError::new_err(error.to_string()))
    }

    fn __repr__(&self) -> String {
        self.describe()
    }
}

impl PyLayout {
    /// `Layout.TWITTER` for a preset, else the constructor call that makes it.
    pub(crate) fn describe(&self) -> String {
        match self.0.preset_name() {
            Some(name) => format!("Layout.{}", name.to_uppercase()),
            None => format!(
                "Layout(timestamp_bits={}, node_bits={}, sequence_bits={}, epoch_ms={}, tick_ms={})",
                self.0.timestamp_bits(),
                self.0.node_bits(),
                self.0.sequence_bits(),
                self.0.epoch_ms(),
                self.0.tick_ms()
            ),
        }
    }
}

/// An ID's parts: the start of its tick (Unix ms), its node and its sequence.
#[pyclass(frozen, eq, hash, module = "atomflake", name = "Parts")]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct PyParts(Parts);

#[pymethods]
impl PyParts {
    /// The start of the ID's tick, Unix ms.
    #[getter]
    fn unix_ms(&self) -> u64 {
        self.0.unix_ms
    }
    /// The node that minted the ID.
    #[getter]
    fn node(&self) -> u64 {
        self.0.node
    }
    /// The ID's place within its tick on that node.
    #[getter]
    fn sequence(&self) -> u64 {
        self.0.sequence
    }
    /// The start of the ID's tick as an aware `datetime` in UTC.
    #[getter]
    fn datetime<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        datetime_of(py, self.0.unix_ms)
    }

    fn __repr__(&self) -> String {
        format!(
            "Parts(unix_ms={}, node={}, sequence={})",
            self.0.unix_ms, self.0.node, self.0.sequence
        )
    }
}

/// An ID as 13 characters of Crockford base32, which sort as the IDs do.
#[pyfunction]
pub(crate) fn to_base32(id: &Bound<'_, PyAny>) -> PyResult<String> {
    Ok(Id::new(args::id(id)?).to_base32().to_string())
}

/// The ID of 13 characters of base32; a `ValueError` says what is wrong with the text.
#[pyfunction]
pub(crate) fn from_base32(text: &str) -> PyResult<u64> {
    Id::from_base32(text)
        .map(Id::get)
        .map_err(|error| PyValueError::new_err(error.to_string()))
}

/// An ID as 11 characters of base62 (`0-9A-Za-z`, in ASCII order), which sort as the IDs
/// do.
#[pyfunction]
pub(crate) fn to_base62(id: &Bound<'_, PyAny>) -> PyResult<String> {
    Ok(Id::new(args::id(id)?).to_base62().to_string())
}

/// The ID of 11 characters of base62; a `ValueError` says what is wrong with the text.
#[pyfunction]
pub(crate) fn from_base62(text: &str) -> PyResult<u64> {
    Id::from_base62(text)
        .map(Id::get)
        .map_err(|error| PyValueError::new_err(error.to_string()))
}

/// A keyed permutation of the IDs (Speck64/128, cycle-walked within each half of the
/// 64-bit numbers): `unmask(mask(id)) == id`, and an ID below 2**63 masks to one below
/// 2**63. The key is never shown.
#[pyclass(frozen, module = "atomflake", name = "Mask")]
pub(crate) struct PyMask(atomflake::Mask);

#[pymethods]
impl PyMask {
    /// A mask with a 16-byte key (`bytes`); a `ValueError` for another length.
    #[new]
    fn new(key: &[u8]) -> PyResult<Self> {
        <[u8; atomflake::MASK_KEY_BYTES]>::try_from(key)
            .map(|key| PyMask(atomflake::Mask::new(key)))
            .map_err(|_| PyValueError::new_err(format!("key has {} bytes: a key is 16 bytes", key.len())))
    }

    /// A mask with the key in a file of 16 raw bytes or 32 hex digits, readable by its
    /// owner alone; a `ValueError` names the file and what is wrong with it.
    #[staticmethod]
    fn from_key_file(path: &Bound<'_, PyAny>) -> PyResult<Self> {
        let path: std::path::PathBuf = path.extract()?;
        atomflake::Mask::from_key_file(&path)
            .map(PyMask)
            .map_err(|error| PyValueError::new_err(error.to_string()))
    }

    /// The masked ID of `id`.
    fn mask(&self, id: &Bound<'_, PyAny>) -> PyResult<u64> {
        Ok(self.0.mask(Id::new(args::id(id)?)).get())
    }

    /// The ID whose masked ID is `masked`.
    fn unmask(&self, masked: &Bound<'_, PyAny>) -> PyResult<u64> {
        Ok(self.0.unmask(Id::new(args::id(masked)?)).get())
    }

    #[expect(
        clippy::unused_self,
        reason = "Python's repr is a method; it never shows the key"
    )]
    fn __repr__(&self) -> &'static str {
        "Mask(...)"
    }
}

/// The ID of decimal text; a `ValueError` says what is wrong with the text.
#[pyfunction]
pub(crate) fn parse_id(text: &str) -> PyResult<u64> {
    text.parse::<Id>()
        .map(Id::get)
        .map_err(|error| PyValueError::new_err(error.to_string()))
}
