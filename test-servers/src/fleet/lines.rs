//! Reading the lines a holder printed (see the [module docs](super) for what it prints).

/// The rest of the first line that starts with `prefix`.
pub fn field<'a>(lines: &'a [String], prefix: &str) -> &'a str {
    lines
        .iter()
        .find_map(|line| line.strip_prefix(prefix))
        .unwrap_or_else(|| panic!("no {prefix:?} line: {:?}", tail(lines)))
}

/// The last 8 lines, for messages.
pub fn tail(lines: &[String]) -> &[String] {
    &lines[lines.len().saturating_sub(8)..]
}

/// The `(id, stamp)` of every `id` line.
pub fn ids(lines: &[String]) -> Vec<(u64, u64)> {
    lines
        .iter()
        .filter_map(|line| line.strip_prefix("id "))
        .map(|rest| {
            let (id, stamp) = rest.split_once(' ').unwrap();
            (id.parse().unwrap(), stamp.parse().unwrap())
        })
        .collect()
}

/// The `(stamp, text)` of every `lease` line.
pub fn lease_lines(lines: &[String]) -> Vec<(u64, &str)> {
    lines
        .iter()
        .filter_map(|line| line.strip_prefix("lease "))
        .map(|rest| {
            let (stamp, text) = rest.split_once(' ').unwrap();
            (stamp.parse().unwrap(), text)
        })
        .collect()
}

/// The text of the last `lease` line: why minting stopped.
///
/// # Panics
///
/// When there is none.
pub fn last_refusal(lines: &[String]) -> &str {
    let refusals = lease_lines(lines);
    let Some(&(_, text)) = refusals.last() else {
        panic!("no lease line: {:?}", tail(lines))
    };
    text
}

/// How many `id` lines.
pub fn count_ids(seen: &[String]) -> usize {
    seen.iter().filter(|l| l.starts_with("id ")).count()
}

/// The claim's number in the `node N C` line.
pub fn claim(lines: &[String]) -> i64 {
    field(lines, "node ").split(' ').nth(1).unwrap().parse().unwrap()
}

/// The IDs of every `id` line, in the order printed.
pub fn minted(lines: &[String]) -> Vec<u64> {
    ids(lines).into_iter().map(|(id, _)| id).collect()
}
