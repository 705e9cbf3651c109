//! The handles of generators as JavaScript sees them, and the mints in raw N-API.
//!
//! A JavaScript `Generator` holds its [`Handle`] as an external value, type-tagged so that
//! no other value passes for one. The single-ID mints (`nextId`, `nextIdString`,
//! `nextIdNumber`, `tryNextId`) and the batch (`nextIdsInto`) are plain N-API functions of
//! the handle: a call is
//! `napi_get_cb_info`, the tag's check, `napi_get_value_external` and the result's
//! creation, with none of the per-call bookkeeping napi-rs gives its classes' methods
//! (which costs several times the mint itself). The other functions take the handle
//! through napi-rs, as [`HandleArg`].

#![allow(unsafe_code)]

use crate::generator::Handle;
use napi::bindgen_prelude::{FromNapiValue, Object, ToNapiValue, TypeName, ValidateNapiValue};
use napi::{Env, JsValue, ValueType, sys};
use napi_derive::napi;
use std::ffi::{CStr, c_void};
use std::ops::Deref;
use std::ptr;

/// The type tag of a handle's external value.
static TAG: sys::napi_type_tag = sys::napi_type_tag {
    lower: 0x6174_6f6d_666c_616b,
    upper: 0x6765_6e65_7261_746f,
};

/// `Ok` for `napi_ok`, else the failed call's error.
fn check(status: sys::napi_status, what: &str) -> napi::Result<()> {
    if status == sys::Status::napi_ok {
        Ok(())
    } else {
        Err(napi::Error::from_reason(format!(
            "{what} failed (N-API status {status})"
        )))
    }
}

/// A new handle, returned to JavaScript as an external value whose finalizer drops it.
pub struct HandleBox(pub(crate) Handle);

impl TypeName for HandleBox {
    fn type_name() -> &'static str {
        "External"
    }

    fn value_type() -> ValueType {
        ValueType::External
    }
}

impl ToNapiValue for HandleBox {
    unsafe fn to_napi_value(env: sys::napi_env, value: Self) -> napi::Result<sys::napi_value> {
        let data = Box::into_raw(Box::new(value.0));
        let mut external = ptr::null_mut();
        // SAFETY: `data` is a live `Handle` whose ownership passes to the external: its
        // finalizer, called once when the value is collected, drops it.
        let status = unsafe {
            sys::napi_create_external(
                env,
                data.cast(),
                Some(finalize),
                ptr::null_mut(),
                &raw mut external,
            )
        };
        if let Err(error) = check(status, "napi_create_external") {
            // SAFETY: the external was not made, so `data` is still this function's own.
            drop(unsafe { Box::from_raw(data) });
            return Err(error);
        }
        // SAFETY: `external` is a value of `env`, just made; `TAG` lives for the program.
        check(
            unsafe { sys::napi_type_tag_object(env, external, &raw const TAG) },
            "napi_type_tag_object",
        )?;
        Ok(external)
    }
}

/// Drops the handle of a collected external.
unsafe extern "C" fn finalize(_env: sys::napi_env, data: *mut c_void, _hint: *mut c_void) {
    // SAFETY: `data` is the `Box<Handle>` that `HandleBox::to_napi_value` gave the external,
    // finalized once.
    drop(unsafe { Box::from_raw(data.cast::<Handle>()) });
}

/// The handle in `value`, if it is a handle's external value.
///
/// # Safety
///
/// `value` is a value of `env`, alive for as long as the returned pointer is used.
unsafe fn handle_of(env: sys::napi_env, value: sys::napi_value) -> napi::Result<*const Handle> {
    let mut tagged = false;
    // SAFETY: as the caller promises; a value that is no object is refused with a status.
    let status = unsafe { sys::napi_check_object_type_tag(env, value, &raw const TAG, &raw mut tagged) };
    if status != sys::Status::napi_ok || !tagged {
        return Err(napi::Error::new(
            napi::Status::InvalidArg,
            "not a generator's handle",
        ));
    }
    let mut data = ptr::null_mut();
    // SAFETY: a value with the tag is a handle's external.
    check(
        unsafe { sys::napi_get_value_external(env, value, &raw mut data) },
        "napi_get_value_external",
    )?;
    Ok(data.cast_const().cast())
}

/// A handle passed to a function: valid for the call, whose arguments keep its external
/// alive.
pub struct HandleArg(*const Handle);

impl Deref for HandleArg {
    type Target = Handle;

    fn deref(&self) -> &Handle {
        // SAFETY: the external that owns the handle is an argument of the call this value
        // lives in, and a handle is dropped only when its external is collected.
        unsafe { &*self.0 }
    }
}

impl TypeName for HandleArg {
    fn type_name() -> &'static str {
        "External"
    }

    fn value_type() -> ValueType {
        ValueType::External
    }
}

impl ValidateNapiValue for HandleArg {}

impl FromNapiValue for HandleArg {
    unsafe fn from_napi_value(env: sys::napi_env, value: sys::napi_value) -> napi::Result<Self> {
        // SAFETY: `value` is this call's argument.
        unsafe { handle_of(env, value) }.map(HandleArg)
    }
}

/// Calls `mint` with the handle that is the call's first argument and its second argument
/// (`undefined` if none), and returns its value to JavaScript, or throws its error.
///
/// # Safety
///
/// `env` and `info` are those N-API passed to the callback.
unsafe fn call<T: ToNapiValue>(
    env: sys::napi_env,
    info: sys::napi_callback_info,
    mint: impl FnOnce(&Handle, sys::napi_value) -> napi::Result<T>,
) -> sys::napi_value {
    let mut count = 2;
    let mut args = [ptr::null_mut(); 2];
    // SAFETY: as the caller promises; `args` has room for `count` values (missing ones are
    // `undefined`, which the tag's check refuses).
    let result = check(
        unsafe {
            sys::napi_get_cb_info(
                env,
                info,
                &raw mut count,
                args.as_mut_ptr(),
                ptr::null_mut(),
                ptr::null_mut(),
            )
        },
        "napi_get_cb_info",
    )
    // SAFETY: the argument lives through this call.
    .and_then(|()| unsafe { handle_of(env, args[0]) })
    // SAFETY: as `HandleArg::deref`.
    .and_then(|handle| mint(unsafe { &*handle }, args[1]))
    // SAFETY: `env` is this call's.
    .and_then(|value| unsafe { T::to_napi_value(env, value) });
    match result {
        Ok(value) => value,
        Err(error) => {
            // SAFETY: `env` is this call's, with no exception pending.
            unsafe { napi::JsError::from(error).throw_into(env) };
            ptr::null_mut()
        }
    }
}

/// `nextIdsInto(handle, ids)`: fills the `BigUint64Array` `ids` (made by `index.js`, so
/// that V8 owns its memory) with IDs in increasing order, as `Handle::fill` does.
unsafe extern "C" fn raw_next_ids_into(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    // SAFETY: N-API's arguments to the callback.
    unsafe {
        call(env, info, |handle, array| {
            let mut kind = 0;
            let mut length = 0;
            let mut data = ptr::null_mut();
            // SAFETY: `array` is this call's argument; a value that is no typed array is
            // refused with a status.
            let status = sys::napi_get_typedarray_info(
                env,
                array,
                &raw mut kind,
                &raw mut length,
                &raw mut data,
                ptr::null_mut(),
                ptr::null_mut(),
            );
            if status != sys::Status::napi_ok || kind != sys::TypedarrayType::biguint64_array {
                return Err(napi::Error::new(napi::Status::InvalidArg, "not a BigUint64Array"));
            }
            let ids: &mut [u64] = if length == 0 {
                &mut []
            } else {
                // SAFETY: a BigUint64Array's `length` elements, 8-aligned, which nothing else
                // reads or writes while this call (on the array's thread) runs.
                std::slice::from_raw_parts_mut(data.cast::<u64>(), length)
            };
            handle.fill(ids)
        })
    }
}

/// A raw N-API function.
type Callback = unsafe extern "C" fn(sys::napi_env, sys::napi_callback_info) -> sys::napi_value;

macro_rules! raw_functions {
    ($($js:literal => $name:ident: $method:ident,)*) => {
        $(
            unsafe extern "C" fn $name(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
                // SAFETY: N-API's arguments to the callback.
                unsafe { call(env, info, |handle, _| handle.$method()) }
            }
        )*

        /// The raw functions, by their JavaScript names.
        const RAW: &[(&CStr, Callback)] = &[$(($js, $name),)* (c"nextIdsInto", raw_next_ids_into)];
    };
}

raw_functions! {
    c"nextId" => raw_next_id: next_id,
    c"nextIdString" => raw_next_id_string: next_id_string,
    c"nextIdNumber" => raw_next_id_number: next_id_number,
    c"tryNextId" => raw_try_next_id: try_next_id,
}

/// Adds the raw functions to the module's exports.
#[napi(module_exports)]
pub fn raw_exports(exports: Object<'_>, env: Env) -> napi::Result<()> {
    for &(name, callback) in RAW {
        let mut function = ptr::null_mut();
        // SAFETY: `env` is the module's; `name` is a C string that outlives the call.
        check(
            unsafe {
                sys::napi_create_function(
                    env.raw(),
                    name.as_ptr(),
                    isize::try_from(name.count_bytes()).unwrap_or(0),
                    Some(callback),
                    ptr::null_mut(),
                    &raw mut function,
                )
            },
            "napi_create_function",
        )?;
        // SAFETY: `exports` is the module's exports object, `function` a value of `env`.
        check(
            unsafe { sys::napi_set_named_property(env.raw(), exports.raw(), name.as_ptr(), function) },
            "napi_set_named_property",
        )?;
    }
    Ok(())
}
