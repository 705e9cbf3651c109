//! Rows, ratios, the Markdown table and the SVG chart of the `report` bin.

use crate::measure::{Latency, Saturation, TWITTER_CAP_PER_S};
use crate::peers::{Entry, How};
use plotters::prelude::*;
use std::fmt::Write as _;
use std::path::Path;

/// A group of the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    /// One thread, no cap reached: ns per ID.
    Unsaturated,
    /// One thread at the Twitter cap: IDs per second and CPU.
    Saturated,
    /// Two threads sharing one generator: aggregate ns per ID.
    Contended,
}

impl Group {
    /// The group's name in the table.
    pub fn name(self) -> &'static str {
        match self {
            Group::Unsaturated => "unsaturated",
            Group::Saturated => "saturated",
            Group::Contended => "contended (2 threads)",
        }
    }
}

/// What a row measured.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Failed the sanity check: not timed.
    Broken(String),
    /// Time per ID, ns (aggregate over the threads in the contended group).
    NsPerId(f64),
    /// One window at saturation.
    Saturated(Saturation),
}

impl Outcome {
    /// The figure a ratio is taken of: ns per ID, or IDs per second at saturation.
    fn figure(&self) -> Option<f64> {
        match self {
            Outcome::Broken(_) => None,
            Outcome::NsPerId(ns) => Some(*ns),
            Outcome::Saturated(s) => Some(s.rate()),
        }
    }
}

/// One row of the table.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// Its group.
    pub group: Group,
    /// The generator.
    pub entry: Entry,
    /// What was measured.
    pub outcome: Outcome,
}

/// A tail-latency row: the percentiles of a single call at saturation.
#[derive(Debug, Clone, PartialEq)]
pub struct TailRow {
    /// The generator.
    pub entry: Entry,
    /// The percentiles, or why the generator was not timed.
    pub latency: Result<Latency, String>,
}

/// This row's figure over atomflake's (the baseline row of the same group timed the same
/// way): above 1 is slower for ns per ID, faster for IDs per second. `None` when either is
/// broken or there is no baseline.
pub fn ratio(rows: &[Row], row: &Row) -> Option<f64> {
    let baseline = rows
        .iter()
        .find(|r| r.group == row.group && r.entry.how == row.entry.how && r.entry.baseline)?;
    Some(row.outcome.figure()? / baseline.outcome.figure()?)
}

fn layout_cell(entry: &Entry) -> String {
    match entry.how {
        How::Tight => entry.layout.to_string(),
        How::Paced => format!("{}, paced bursts", entry.layout),
    }
}

/// The Markdown table of `rows`: one line per row, ratios to atomflake's row.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| group | generator | layout | wait / note | figure | × atomflake | % of cap | CPU s per M IDs (share of a core) | ticks with no ID |\n\
         |---|---|---|---|---|---|---|---|---|\n",
    );
    for row in rows {
        let Entry { name, wait, .. } = row.entry;
        let (figure, cap, cpu, skipped) = match &row.outcome {
            Outcome::Broken(reason) => (
                format!("**BROKEN, not timed**: {reason}"),
                "",
                String::new(),
                String::new(),
            ),
            Outcome::NsPerId(ns) => (format!("{ns:.2} ns/ID"), "", String::new(), String::new()),
            Outcome::Saturated(s) => (
                format!("{:.4} M IDs/s", s.rate() / 1e6),
                "",
                format!("{:.3} s ({:.0}%)", s.cpu_s_per_million(), s.cpu_percent()),
                s.skipped.to_string(),
            ),
        };
        let cap = match &row.outcome {
            Outcome::Saturated(s) => format!("{:.2}%", s.percent_of(TWITTER_CAP_PER_S)),
            _ => cap.to_string(),
        };
        let ratio = ratio(rows, row).map_or_else(String::new, |r| format!("{r:.2}"));
        let _ = writeln!(
            out,
            "| {} | {name} | {} | {wait} | {figure} | {ratio} | {cap} | {cpu} | {skipped} |",
            row.group.name(),
            layout_cell(&row.entry),
        );
    }
    out
}

fn micros(ns: u64) -> String {
    // Exact below 2^52 ns.
    #[allow(clippy::cast_precision_loss)]
    let us = ns as f64 / 1e3;
    if us < 10.0 {
        format!("{us:.3} µs")
    } else {
        format!("{us:.1} µs")
    }
}

/// The Markdown table of single-call latencies at saturation.
pub fn tail_table(rows: &[TailRow]) -> String {
    let mut out = String::from(
        "| generator | layout | wait | calls | p50 | p99 | p99.9 | p99.99 | max |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    for row in rows {
        let Entry {
            name, layout, wait, ..
        } = row.entry;
        let cells = match &row.latency {
            Err(reason) => format!("**BROKEN, not timed**: {reason} | | | | | |"),
            Ok(l) => format!(
                "{} | {} | {} | {} | {} | {}",
                l.calls,
                micros(l.p50),
                micros(l.p99),
                micros(l.p999),
                micros(l.p9999),
                micros(l.max)
            ),
        };
        let _ = writeln!(out, "| {name} | {layout} | {wait} | {cells} |");
    }
    out
}

/// A bar's label in the chart.
fn label(entry: &Entry) -> String {
    if entry.layout == "-" {
        return entry.name.to_string();
    }
    match entry.how {
        How::Tight => format!("{} ({})", entry.name, entry.layout),
        How::Paced => format!("{} ({}, paced)", entry.name, entry.layout),
    }
}

/// One bar of the chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    /// Generator and layout.
    pub label: String,
    /// Million IDs per second.
    pub value: f64,
    /// Whose bar it is.
    pub kind: Kind,
}

/// Whose bar it is: the colour it is drawn in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// atomflake's (orange).
    Atomflake,
    /// A peer's (blue).
    Peer,
    /// The floor, a raw clock read + CAS with no generator (grey).
    Floor,
}

impl Kind {
    fn of(entry: &Entry) -> Kind {
        if entry.name.starts_with("atomflake") {
            Kind::Atomflake
        } else if entry.name.starts_with("floor") {
            Kind::Floor
        } else {
            Kind::Peer
        }
    }

    fn color(self) -> RGBColor {
        match self {
            Kind::Atomflake => RGBColor(230, 120, 20),
            Kind::Peer => RGBColor(70, 110, 170),
            Kind::Floor => RGBColor(150, 150, 150),
        }
    }
}

/// The bars of `group`, in million IDs per second; broken rows are left out.
pub fn bars(rows: &[Row], group: Group) -> Vec<Bar> {
    rows.iter()
        .filter(|r| r.group == group)
        .filter_map(|r| {
            let value = match r.outcome {
                Outcome::NsPerId(ns) => 1e3 / ns,
                Outcome::Saturated(s) => s.rate() / 1e6,
                Outcome::Broken(_) => return None,
            };
            Some(Bar {
                label: label(&r.entry),
                value,
                kind: Kind::of(&r.entry),
            })
        })
        .collect()
}

/// Writes an SVG chart of throughput per generator (million IDs per second, more is
/// better): one panel per group in `panels`, atomflake's bars in orange, the peers' in
/// blue, the floor in grey.
///
/// # Errors
///
/// Drawing or writing the file failed.
pub fn chart(
    path: &Path,
    title: &str,
    panels: &[(&str, Vec<Bar>)],
) -> Result<(), Box<dyn std::error::Error>> {
    const ROW_PX: u32 = 26;
    let heights: Vec<u32> = panels
        .iter()
        .map(|(_, bars)| 80 + ROW_PX * u32::try_from(bars.len()).unwrap_or(0))
        .collect();
    let root = SVGBackend::new(path, (1100, 50 + heights.iter().sum::<u32>())).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 20))?;
    let mut rest = root;
    for ((caption, bars), height) in panels.iter().zip(&heights) {
        let (area, below) = rest.split_vertically(*height);
        rest = below;
        let n = bars.len();
        let max = bars.iter().map(|b| b.value).fold(0.0, f64::max) * 1.15;
        let mut chart = ChartBuilder::on(&area)
            .caption(*caption, ("sans-serif", 16))
            .margin(8)
            .x_label_area_size(30)
            .y_label_area_size(430)
            .build_cartesian_2d(0.0..max.max(1.0), (0..n).into_segmented())?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .x_desc("million IDs per second (more is better)")
            .y_labels(n)
            .y_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => {
                    // Top to bottom in the table's order.
                    bars.get(n.wrapping_sub(1).wrapping_sub(*i))
                        .map_or_else(String::new, |b| b.label.clone())
                }
                SegmentValue::Last => String::new(),
            })
            .draw()?;
        chart.draw_series(bars.iter().enumerate().map(|(i, bar)| {
            let slot = n - 1 - i;
            let color = bar.kind.color();
            let mut rectangle = Rectangle::new(
                [
                    (0.0, SegmentValue::Exact(slot)),
                    (bar.value, SegmentValue::Exact(slot + 1)),
                ],
                color.filled(),
            );
            rectangle.set_margin(3, 3, 0, 0);
            rectangle
        }))?;
        chart.draw_series(bars.iter().enumerate().map(|(i, bar)| {
            Text::new(
                format!("{:.1}", bar.value),
                (bar.value, SegmentValue::CenterOf(n - 1 - i)),
                ("sans-serif", 12),
            )
        }))?;
    }
    rest.present()?;
    Ok(())
}

/// The line before the report's section in benches/README.md.
pub const START: &str = "<!-- report:start (written by the report bin) -->";
/// The line after it.
pub const END: &str = "<!-- report:end -->";

/// `readme` with the text between [`START`] and [`END`] replaced by `section`.
///
/// # Errors
///
/// When the markers are missing or out of order.
pub fn splice(readme: &str, section: &str) -> Result<String, &'static str> {
    let start = readme.find(START).ok_or("no report:start marker")? + START.len();
    let end = readme[start..]
        .find(END)
        .ok_or("no report:end marker after report:start")?
        + start;
    Ok(format!(
        "{}\n\n{}\n{}",
        &readme[..start],
        section.trim_end(),
        &readme[end..]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn row(group: Group, entry: Entry, outcome: Outcome) -> Row {
        Row {
            group,
            entry,
            outcome,
        }
    }

    fn rows() -> Vec<Row> {
        let ours = Entry::new("atomflake Generator", "41/0/22", How::Tight).baseline();
        let ours_paced = Entry::new("atomflake Generator", "41/10/12", How::Paced).baseline();
        vec![
            row(Group::Unsaturated, ours, Outcome::NsPerId(10.0)),
            row(
                Group::Unsaturated,
                Entry::new("peer", "41/0/22", How::Tight),
                Outcome::NsPerId(5.0),
            ),
            row(Group::Unsaturated, ours_paced, Outcome::NsPerId(20.0)),
            row(
                Group::Unsaturated,
                Entry::new("fixed peer", "41/10/12", How::Paced),
                Outcome::NsPerId(30.0),
            ),
            row(
                Group::Unsaturated,
                Entry::new("constant", "0/0/64", How::Tight),
                Outcome::Broken("ID 1 of the sample repeats the one before".into()),
            ),
            row(
                Group::Saturated,
                Entry::new("atomflake Generator", "41/10/12", How::Tight).baseline(),
                Outcome::Saturated(Saturation {
                    minted: 4_096_000,
                    wall: Duration::from_secs(1),
                    cpu: Duration::from_millis(250),
                    skipped: 2,
                }),
            ),
        ]
    }

    #[test]
    fn ratios_compare_with_atomflake_timed_the_same_way() {
        let rows = rows();
        assert_eq!(ratio(&rows, &rows[0]), Some(1.0));
        assert_eq!(ratio(&rows, &rows[1]), Some(0.5));
        // Paced rows against the paced baseline, not the tight one.
        assert_eq!(ratio(&rows, &rows[3]), Some(1.5));
        assert_eq!(ratio(&rows, &rows[4]), None);
    }

    #[test]
    fn the_table_has_every_row_and_marks_the_broken_one() {
        let rows = rows();
        let table = table(&rows);
        assert_eq!(table.lines().count(), 2 + rows.len());
        assert!(
            table.contains("| unsaturated | peer | 41/0/22 |  | 5.00 ns/ID | 0.50 |"),
            "{table}"
        );
        assert!(table.contains("41/10/12, paced bursts"), "{table}");
        assert!(
            table.contains("**BROKEN, not timed**: ID 1 of the sample repeats"),
            "{table}"
        );
        assert!(
            table.contains("4.0960 M IDs/s | 1.00 | 100.00% | 0.061 s (25%) | 2 |"),
            "{table}"
        );
    }

    #[test]
    fn bars_leave_out_broken_rows_and_convert_to_million_per_second() {
        let bars = bars(&rows(), Group::Unsaturated);
        assert_eq!(bars.len(), 4);
        assert_eq!(
            bars[0],
            Bar {
                label: "atomflake Generator (41/0/22)".to_string(),
                value: 100.0,
                kind: Kind::Atomflake
            }
        );
        assert!((bars[1].value - 200.0).abs() < 1e-9);
        assert_eq!(bars[1].kind, Kind::Peer);
    }

    #[test]
    fn the_chart_is_an_svg_with_every_label() {
        let path = std::env::temp_dir().join(format!("atomflake-chart-{}.svg", std::process::id()));
        let panels = [("one thread", bars(&rows(), Group::Unsaturated))];
        chart(&path, "test", &panels).expect("drawn");
        let svg = std::fs::read_to_string(&path).expect("written");
        std::fs::remove_file(&path).expect("removed");
        assert!(svg.starts_with("<svg"), "{}", &svg[..40]);
        for bar in &panels[0].1 {
            assert!(svg.contains(bar.label.as_str()), "{} missing", bar.label);
        }
    }

    #[test]
    fn splice_replaces_only_the_marked_section() {
        let readme = format!("# Title\n\n{START}\n\nold table\n{END}\n\nafter\n");
        let spliced = splice(&readme, "new table\n").expect("markers");
        assert_eq!(
            spliced,
            format!("# Title\n\n{START}\n\nnew table\n{END}\n\nafter\n")
        );
        // Splicing again gives the same file.
        assert_eq!(splice(&spliced, "new table").expect("markers"), spliced);
        assert!(splice("no markers", "x").is_err());
        assert!(splice(&format!("{END}\n{START}"), "x").is_err());
    }

    #[test]
    fn the_tail_table_shows_microseconds() {
        let entry = Entry::new("atomflake Generator", "41/10/12", How::Tight).wait("Wait::Spin");
        let latency = Latency {
            calls: 10,
            p50: 25,
            p99: 40,
            p999: 900_000,
            p9999: 950_000,
            max: 1_200_000,
        };
        let table = tail_table(&[TailRow {
            entry,
            latency: Ok(latency),
        }]);
        assert!(
            table.contains("| 10 | 0.025 µs | 0.040 µs | 900.0 µs | 950.0 µs | 1200.0 µs |"),
            "{table}"
        );
    }
}
