//! Masking: under any key, `unmask` undoes `mask`, each half of the `u64`s stays in its half,
//! and `mask_all`/`unmask_all` (the cipher's rounds on many IDs at once, in vector
//! registers) give exactly what `mask`/`unmask` (the `speck-cipher` crate's cipher) give.
#![no_main]

use atomflake::{Id, Mask};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: ([u8; 16], Vec<u64>)| {
    let (key, raw) = input;
    let mask = Mask::new(key);
    let ids: Vec<Id> = raw.into_iter().map(Id::new).collect();
    let mut masked = ids.clone();
    mask.mask_all(&mut masked);
    for (&id, &out) in ids.iter().zip(&masked) {
        assert_eq!(out, mask.mask(id), "{id}");
        assert_eq!(out.get() >> 63, id.get() >> 63, "{id}");
        assert_eq!(mask.unmask(out), id, "{id}");
    }
    mask.unmask_all(&mut masked);
    assert_eq!(masked, ids);
});
