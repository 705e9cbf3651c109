//! What SQL's `atomflake_to_uuid` and `atomflake_from_uuid` must answer (the script's and
//! the extension's alike), computed by the core: each UUID's text, and for UUIDs that are
//! not a layout's, the exact error.

use atomflake::{Id, Layout};

/// `uuid` (a 128-bit number) in the canonical text, 8-4-4-4-12 lowercase hex digits, as
/// PostgreSQL prints a `uuid`.
pub fn text(uuid: u128) -> String {
    let hex = format!("{uuid:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// The UUID of `id` in `layout`, as text.
pub fn of(layout: Layout, id: u64) -> String {
    text(Id::new(id).to_uuid_u128(layout).expect("an ID of the layout"))
}

/// UUIDs that are not one of `layout`'s IDs that fit a bigint, each with the error SQL's
/// `atomflake_from_uuid` raises: a version 4 UUID, another variant, another layout's
/// fingerprint, a time other than the ID's, an ID past the layout's width or past a bigint.
pub fn refused(layout: Layout) -> Vec<(String, String)> {
    let max = layout.max_id().min(i64::MAX as u64);
    let valid = Id::new(max).to_uuid_u128(layout).expect("an ID of the layout");
    let mut cases: Vec<u128> = vec![
        0x67e5_5044_10b1_426f_9247_bb68_0e5f_e0c8,
        valid | 0b11 << 62,
        valid ^ 1 << 66,
        valid + (1 << 80),
        // The ID's top bit: past the layout, or (all 64 bits) past a bigint.
        if layout.max_id() > i64::MAX as u64 {
            Id::new(layout.max_id())
                .to_uuid_u128(layout)
                .expect("an ID of the layout")
        } else {
            valid | 1 << 65
        },
    ];
    if max < 1 << 62 {
        // A bit of a bigint above the layout's width.
        cases.push(valid | 1 << 61);
    }
    cases
        .into_iter()
        .map(|uuid| {
            let text = text(uuid);
            let message = match Id::from_uuid_u128(uuid, layout) {
                Err(error) => format!("uuid {text} is not an id's: {error}"),
                Ok(id) => format!(
                    "uuid {text} holds id {id}, out of range for bigint: allowed 0..={}",
                    i64::MAX
                ),
            };
            (text, message)
        })
        .collect()
}
