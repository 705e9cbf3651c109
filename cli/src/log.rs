//! What the command says on stderr, through `tracing`: a line of text per event by default
//! (`atomflake serve: listening on …`), or with `serve --log-format json` one JSON object per
//! line, for a log collector: `{"timestamp", "level", "message", "target", "event", …}`
//! with the event's fields (`event` names what happened: `listening`, `claimed`, `lost`,
//! `draining`, `released`, `stopped`, …).
//!
//! Only this workspace's events are written (targets `atomflake…`); the libraries below
//! (tonic, hyper, sqlx) say nothing.

use std::fmt;
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::fmt::FmtContext;
use tracing_subscriber::fmt::format::{FormatEvent, FormatFields, Writer};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LogFormat {
    /// `TARGET: MESSAGE`, as `atomflake serve: listening on 127.0.0.1:8080 …`.
    #[default]
    Text,
    /// One JSON object per line, with a timestamp, the level and every field.
    Json,
}

/// Sends this process's events to stderr in `format`. Called once, first thing.
pub(crate) fn init(format: LogFormat) {
    let ours = tracing_subscriber::filter::filter_fn(|metadata| metadata.target().starts_with("atomflake"));
    let layer = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let layer = match format {
        LogFormat::Text => layer.event_format(Text).boxed(),
        LogFormat::Json => layer
            .json()
            .flatten_event(true)
            // A traced request's lines carry its span, `request`, with its `trace_id`.
            .with_current_span(true)
            .with_span_list(false)
            .boxed(),
    };
    // Another subscriber set first (none is) keeps its place.
    let _ = tracing_subscriber::registry()
        .with(layer.with_filter(ours))
        .try_init();
}

/// `TARGET: MESSAGE`: the line a person reads. The other fields are in the message's text
/// already; they are there for the JSON format.
struct Text;

impl<S, N> FormatEvent<S, N> for Text
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut message = Message(None);
        event.record(&mut message);
        let text = message.0.unwrap_or_default();
        writeln!(writer, "{}: {text}", event.metadata().target())
    }
}

/// The `message` field of an event.
struct Message(Option<String>);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            // A message's `Debug` is its text (format arguments).
            self.0 = Some(format!("{value:?}"));
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0 = Some(value.to_owned());
        }
    }
}
