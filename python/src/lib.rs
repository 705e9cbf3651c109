//! `atomflake._atomflake`: the native module of the `atomflake` Python package. Python sees
//! the same generator, layouts, mark stores and leases as Rust, with Rust's error messages.
//!
//! - [`generator`]: `Generator` and `lease()`, which mint with the GIL released while they
//!   wait.
//! - [`layout`]: `Layout`, `Parts` and the ID text forms.
//! - [`errors`]: the exception types, and how each Rust error maps to one.

mod args;
mod errors;
mod generator;
mod layout;

use pyo3::prelude::*;

/// The native module; `atomflake/__init__.py` re-exports it.
#[pymodule]
fn _atomflake(module: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = module.py();
    module.add_class::<generator::PyGenerator>()?;
    module.add_class::<layout::PyLayout>()?;
    module.add_class::<layout::PyParts>()?;
    module.add_class::<layout::PyMask>()?;
    module.add_function(wrap_pyfunction!(generator::lease, module)?)?;
    module.add_function(wrap_pyfunction!(layout::to_base32, module)?)?;
    module.add_function(wrap_pyfunction!(layout::from_base32, module)?)?;
    module.add_function(wrap_pyfunction!(layout::to_base62, module)?)?;
    module.add_function(wrap_pyfunction!(layout::from_base62, module)?)?;
    module.add_function(wrap_pyfunction!(layout::parse_id, module)?)?;
    module.add("MAX_BATCH", generator::MAX_BATCH)?;
    errors::register(py, module)?;
    Ok(())
}
