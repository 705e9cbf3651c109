//! What a fleet's history must show.

use super::lines::ids;
use std::collections::{HashMap, HashSet};

/// Panics when an ID is there twice.
pub fn assert_unique(all: &[u64]) {
    let unique: HashSet<u64> = all.iter().copied().collect();
    assert_eq!(unique.len(), all.len(), "duplicate ids");
}

/// Checks a fleet's history (every process's lines, in spawn order): no ID twice, each
/// process's IDs strictly increasing, and on each node every holder's IDs past every
/// earlier holder's. With `generations_kept`, the holders of a node are ordered by their
/// claims' generations, each larger than the last; without (an engine that can forget
/// claims counts them again from what it kept), by their first IDs. The number of IDs.
pub fn check_fleet_history(
    seed: u64,
    schedule: &[String],
    histories: &[Vec<String>],
    generations_kept: bool,
) -> usize {
    let mut owner = HashMap::new();
    // node -> (generation, process, ids)
    let mut tenures: Vec<(u64, i64, usize, Vec<u64>)> = Vec::new();
    let mut total = 0;
    for (process, lines) in histories.iter().enumerate() {
        let minted: Vec<u64> = ids(lines).into_iter().map(|(id, _)| id).collect();
        total += minted.len();
        assert!(
            minted.windows(2).all(|pair| pair[0] < pair[1]),
            "seed {seed}: process {process}'s ids do not strictly increase"
        );
        for &id in &minted {
            if let Some(other) = owner.insert(id, process) {
                panic!(
                    "seed {seed}: id {id} minted by processes {other} and {process}; schedule {schedule:?}"
                );
            }
        }
        if let Some(claim) = lines.iter().find_map(|line| line.strip_prefix("node ")) {
            let (node, generation) = claim.split_once(' ').unwrap();
            tenures.push((
                node.parse().unwrap(),
                generation.parse().unwrap(),
                process,
                minted,
            ));
        }
    }
    if generations_kept {
        tenures.sort_by_key(|&(node, generation, ..)| (node, generation));
    } else {
        tenures.sort_by_key(|(node, _, _, minted)| (*node, minted.first().copied()));
    }
    // Per node, in claim order: the largest id of the earlier holders, and which.
    let mut before: HashMap<u64, (i64, usize, u64)> = HashMap::new();
    for (node, generation, process, minted) in &tenures {
        if let (Some(&(earlier, holder, last)), Some(first)) = (before.get(node), minted.first()) {
            assert!(
                !generations_kept || earlier < *generation,
                "seed {seed}: node {node} claimed twice as generation {generation}"
            );
            assert!(
                first > &last,
                "seed {seed}: on node {node}, process {process} (generation {generation}) started at {first}, \
                 not past process {holder}'s (generation {earlier}) last id {last}; schedule {schedule:?}"
            );
        }
        if let Some(&last) = minted.iter().max() {
            before.insert(*node, (*generation, *process, last));
        }
    }
    let nodes: HashSet<u64> = tenures.iter().map(|&(node, ..)| node).collect();
    println!(
        "seed {seed}: {total} ids from {} processes in {} tenures on nodes {nodes:?}, none twice",
        histories.len(),
        tenures.len()
    );
    total
}
