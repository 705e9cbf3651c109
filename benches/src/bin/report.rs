//! atomflake and its peers side by side, one process, one run: the same comparisons as the
//! criterion benches (`benches/peers.rs`), with shorter windows, printed as a Markdown table
//! (each figure, its ratio to atomflake's, the share of the cap and the CPU where they
//! apply) and drawn as an SVG chart of throughput per generator.
//!
//! ```sh
//! cargo run --release -p atomflake-benches --bin report            # ~40 s: writes benches/report.svg and the table into benches/README.md
//! cargo run --release -p atomflake-benches --bin report -- --quick # a few seconds, writes nothing in the repository
//! ```
//!
//! Options: `--quick` (short windows: a smoke run, not for comparison), `--out PATH` (the
//! chart's path), `--no-readme` (leave benches/README.md alone).

use atomflake_benches::measure;
use atomflake_benches::peers::{self, Entry, How, Visit, VisitShared};
use atomflake_benches::report::{self, Group, Outcome, Row, TailRow};
use atomflake_benches::sanity;
use crossbeam_utils::CachePadded;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long each kind of measurement runs.
#[derive(Clone, Copy)]
struct Budget {
    /// Per row of back-to-back calls (median of `SAMPLES`).
    tight: Duration,
    /// Per row of paced bursts (mostly waiting between bursts).
    paced: Duration,
    /// The saturation window per row (at least 1 s).
    saturated: Duration,
    /// The latency window per row.
    tail: Duration,
}

const SAMPLES: u32 = 10;

const FULL: Budget = Budget {
    tight: Duration::from_millis(300),
    paced: Duration::from_millis(800),
    saturated: Duration::from_secs(1),
    tail: Duration::from_millis(500),
};

const QUICK: Budget = Budget {
    tight: Duration::from_millis(30),
    paced: Duration::from_millis(60),
    saturated: Duration::from_millis(100),
    tail: Duration::from_millis(50),
};

/// Checks a generator, then times it if it passed.
fn checked(entry: &Entry, mint: impl FnMut() -> u128, unix_ms: impl Fn(u128) -> u64) -> Result<(), String> {
    sanity::check(mint, unix_ms).map_err(|broken| {
        eprintln!("BROKEN, not timed: {} ({}): {broken}", entry.name, entry.layout);
        broken.to_string()
    })
}

struct Unsaturated<'a> {
    budget: Budget,
    rows: &'a mut Vec<Row>,
}

impl Visit for Unsaturated<'_> {
    fn visit(&mut self, entry: Entry, mut mint: impl FnMut() -> u128, unix_ms: impl Fn(u128) -> u64) {
        let outcome = match checked(&entry, &mut mint, unix_ms) {
            Err(reason) => Outcome::Broken(reason),
            Ok(()) => Outcome::NsPerId(match entry.how {
                How::Tight => {
                    measure::per_id_ns(self.budget.tight, SAMPLES, |n| measure::tight(n, &mut mint))
                }
                How::Paced => {
                    measure::per_id_ns(self.budget.paced, SAMPLES, |n| measure::paced(n, &mut mint))
                }
            }),
        };
        self.rows.push(Row {
            group: Group::Unsaturated,
            entry,
            outcome,
        });
    }
}

struct Saturated<'a> {
    budget: Budget,
    rows: &'a mut Vec<Row>,
    tails: &'a mut Vec<TailRow>,
}

impl Visit for Saturated<'_> {
    fn visit(&mut self, entry: Entry, mut mint: impl FnMut() -> u128, unix_ms: impl Fn(u128) -> u64) {
        let (outcome, latency) = match checked(&entry, &mut mint, unix_ms) {
            Err(reason) => (Outcome::Broken(reason.clone()), Err(reason)),
            Ok(()) => (
                Outcome::Saturated(measure::saturate_with(self.budget.saturated, &mut mint)),
                Ok(measure::latency(self.budget.tail, &mut mint)),
            ),
        };
        self.rows.push(Row {
            group: Group::Saturated,
            entry,
            outcome,
        });
        self.tails.push(TailRow { entry, latency });
    }
}

struct Contended<'a> {
    budget: Budget,
    rows: &'a mut Vec<Row>,
}

const THREADS: u64 = 2;

impl VisitShared for Contended<'_> {
    fn visit(&mut self, entry: Entry, mint: impl Fn() -> u128 + Sync, unix_ms: impl Fn(u128) -> u64) {
        let outcome = match checked(&entry, &mint, unix_ms) {
            Err(reason) => Outcome::Broken(reason),
            Ok(()) => Outcome::NsPerId(match entry.how {
                How::Tight => measure::per_id_ns(self.budget.tight, SAMPLES, |n| {
                    measure::on_threads(THREADS, n, &mint)
                }),
                How::Paced => measure::per_id_ns(self.budget.paced, SAMPLES, |n| {
                    measure::paced_on_threads(THREADS, n, &mint)
                }),
            }),
        };
        self.rows.push(Row {
            group: Group::Contended,
            entry,
            outcome,
        });
    }
}

/// The floors: one quanta raw read + one CAS, on this thread's word, and on one word the
/// two threads share.
fn floors(budget: Budget, rows: &mut Vec<Row>) {
    let clock = quanta::Clock::new();
    let word = AtomicU64::new(0);
    let ns = measure::per_id_ns(budget.tight, SAMPLES, |n| measure::floor(n, &clock, &word));
    rows.push(Row {
        group: Group::Unsaturated,
        entry: Entry::new("floor: quanta raw + CAS", "-", How::Tight),
        outcome: Outcome::NsPerId(ns),
    });
    let shared = CachePadded::new(AtomicU64::new(0));
    let ns = measure::per_id_ns(budget.tight, SAMPLES, |n| {
        measure::floor_on_threads(THREADS, n, &clock, &shared)
    });
    rows.push(Row {
        group: Group::Contended,
        entry: Entry::new("floor: quanta raw + CAS on one shared word", "-", How::Tight),
        outcome: Outcome::NsPerId(ns),
    });
}

/// The CPU model from /proc/cpuinfo.
fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, model)| model.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".to_string())
}

/// The 1-minute load average from /proc/loadavg: other work on the machine before the run.
fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().and_then(|x| x.parse().ok()))
}

/// A load average at or above this share of the logical CPUs marks the run as busy.
const BUSY_LOAD_PER_CPU: f64 = 0.75;

/// Today's date (UTC), `YYYY-MM-DD`, from the system clock (days to civil date: the
/// proleptic Gregorian calendar, eras of 400 years).
fn today() -> String {
    let days = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
        / 86_400;
    let z = days + 719_468;
    let (era, doe) = (z / 146_097, z % 146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

struct Options {
    quick: bool,
    out: PathBuf,
    readme: bool,
}

fn options() -> Options {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut args = std::env::args().skip(1);
    let (mut quick, mut out, mut readme) = (false, None, true);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => quick = true,
            "--out" => out = Some(PathBuf::from(args.next().expect("--out PATH"))),
            "--no-readme" => readme = false,
            other => panic!("unknown option {other}: use --quick, --out PATH, --no-readme"),
        }
    }
    let out = out.unwrap_or_else(|| {
        if quick {
            std::env::temp_dir().join("atomflake-report-quick.svg")
        } else {
            manifest.join("report.svg")
        }
    });
    Options {
        quick,
        out,
        readme: readme && !quick,
    }
}

fn main() {
    let options = options();
    let budget = if options.quick { QUICK } else { FULL };
    let start = Instant::now();
    let cpus = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let load = load_average();
    // Exact: a CPU count.
    #[allow(clippy::cast_precision_loss)]
    let busy = load.is_some_and(|l| l >= BUSY_LOAD_PER_CPU * cpus as f64);
    let header = format!(
        "{}, {cpus} logical CPUs, load average {} at the start, {}{}",
        cpu_model(),
        load.map_or_else(|| "unknown".to_string(), |l| format!("{l:.2}")),
        today(),
        if options.quick {
            " (`--quick`: a smoke run, not for comparison)"
        } else if busy {
            " (**the machine was busy: other work ran beside this one, so the figures are \
             noisy and not for comparison**)"
        } else {
            ""
        }
    );
    eprintln!("{header}: measuring…");

    let mut rows = Vec::new();
    let mut tails = Vec::new();
    floors(budget, &mut rows);
    peers::unsaturated(&mut Unsaturated {
        budget,
        rows: &mut rows,
    });
    peers::contended(&mut Contended {
        budget,
        rows: &mut rows,
    });
    peers::saturated(&mut Saturated {
        budget,
        rows: &mut rows,
        tails: &mut tails,
    });
    let timer = measure::timer_overhead_ns();
    // Unsaturated first, then contended, then saturated.
    // Back-to-back rows before paced ones (a stable sort: list order within).
    rows.sort_by_key(|r| {
        let group = match r.group {
            Group::Unsaturated => 0,
            Group::Contended => 1,
            Group::Saturated => 2,
        };
        (group, r.entry.how == How::Paced)
    });

    let mut text = format!(
        "{header}; `cargo run --release -p atomflake-benches --bin report{}` ({:.0} s).\n\n",
        if options.quick { " -- --quick" } else { "" },
        start.elapsed().as_secs_f64()
    );
    text += &report::table(&rows);
    let _ = write!(
        text,
        "\nSingle `next_id` latency at saturation (Twitter layout, one thread; each call timed \
         with two quanta raw reads, whose own cost, {timer} ns at the median, is included):\n\n"
    );
    text += &report::tail_table(&tails);
    println!("{text}");

    let panels = [
        (
            "one thread, no cap reached (unsaturated)",
            report::bars(&rows, Group::Unsaturated),
        ),
        (
            "two threads sharing one generator (contended, aggregate)",
            report::bars(&rows, Group::Contended),
        ),
    ];
    // Short enough to fit the image; the machine, load and command are in the README's
    // header line above the tables.
    let title = "atomflake and its peers: million IDs per second, one run";
    match report::chart(&options.out, title, &panels) {
        Ok(()) => eprintln!("chart: {}", options.out.display()),
        Err(error) => eprintln!("chart not written: {error}"),
    }
    if options.readme {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("README.md");
        let readme = std::fs::read_to_string(&path).expect("benches/README.md");
        match report::splice(&readme, &text) {
            Ok(updated) => {
                std::fs::write(&path, updated).expect("benches/README.md written");
                eprintln!("table: {}", path.display());
            }
            Err(error) => eprintln!("README not updated: {error}"),
        }
    }
}
