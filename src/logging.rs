//! A `tracing` set-up for Lambda that follows Lambda's own log controls. *Feature `logging`.*
//!
//! ```no_run
//! # fn main() -> Result<(), sqs_claim::Error> {
//! sqs_claim::logging::init()?;
//! # Ok(())
//! # }
//! ```
//!
//! What it reads, in this order:
//!
//! | variable | set by | effect |
//! |----------|--------|--------|
//! | `AWS_LAMBDA_LOG_FORMAT` | the function's `LoggingConfig.LogFormat` | `JSON`: one flat JSON object per line; `Text`: `tracing`'s plain text. Unset: [`Logging::default_format`] (text unless changed) |
//! | `AWS_LAMBDA_LOG_LEVEL` | the function's `ApplicationLogLevel` | the most verbose level written (`TRACE`, `DEBUG`, `INFO`, `WARN`, `ERROR`, `FATAL`), and the filter when `RUST_LOG` is unset |
//! | `RUST_LOG` | you | the filter (`tracing` `EnvFilter` syntax: `info`, `sqs_claim=debug,warn`), never past `AWS_LAMBDA_LOG_LEVEL`. Unset: `AWS_LAMBDA_LOG_LEVEL`, else `info` |
//!
//! `AWS_LAMBDA_LOG_LEVEL` is a ceiling, not a default that `RUST_LOG` can raise: in JSON format
//! Lambda itself drops every line below it, so writing them would only cost time. A value that
//! cannot be read is ignored with a warning once the subscriber is installed.
//!
//! **JSON lines** carry `timestamp` (RFC 3339), `level` (`INFO`, ...), `message` and `target` at
//! the top level, as Lambda's JSON log format expects, then the event's fields and the fields of
//! every span it is in, flattened: an event inside a handler carries the `message` span's
//! `message_id`, `key`, `group` and `receive_count`, the `batch` span's `request_id`, and
//! `lambda_runtime`'s `requestId`. On a name clash the event's own field wins over a span's,
//! an inner span's over an outer one's; `timestamp`, `level`, `message` and `target` are
//! never overwritten by a field.
//!
//! ```json
//! {"timestamp":"2026-12-01T03:00:00.123456Z","level":"WARN","message":"message failed","target":"sqs_claim::processor::run","message_id":"...","key":"payments#ord-1","kind":"handler_error","reason":"...","request_id":"...","requestId":"...","records":10}
//! ```
//!
//! Whatever the filter says, `lambda_runtime`'s TRACE events are dropped (`no_raw_events`):
//! they carry whole raw events, message bodies included. [`Logging::init`] drops them for the
//! whole process (a global filter), not only for its own layer: `lambda_runtime` 1.5 reads
//! each raw event as UTF-8 *to log it*, and when that log line is enabled anywhere, a payload
//! that is not UTF-8 ends its runtime loop (the error of the log line is returned out of the
//! loop) instead of failing that one invocation. Disabled, the event is never formatted, and
//! `lambda_runtime` answers such a payload with an invocation error and goes on. A subscriber
//! of your own must keep that line disabled too: add `no_raw_events` to it as a global
//! filter (`registry().with(no_raw_events()).with(...)`), not only as a layer's filter.

use std::fmt;
use std::str::FromStr;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::subscriber::Interest;
use tracing::{Event, Metadata, Subscriber};
use tracing_subscriber::filter::{EnvFilter, FilterFn, LevelFilter};
use tracing_subscriber::fmt::format::{JsonFields, Writer};
use tracing_subscriber::fmt::time::FormatTime;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields, MakeWriter};
use tracing_subscriber::layer::{Context, Filter, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;

use crate::{Error, ErrorKind};

/// Installs the set-up [`Logging::from_env`] describes as the global subscriber, writing to
/// stdout (where Lambda reads a function's logs).
///
/// Fails ([`ErrorKind::Config`]) if a global subscriber is already installed.
pub fn init() -> Result<(), Error> {
    Logging::from_env().init()
}

/// A filter that drops `lambda_runtime`'s TRACE events whatever else is enabled: the runtime
/// logs every raw event there, message bodies included. [`Logging`] always applies it; add it
/// to a layer of your own with `.with_filter(no_raw_events())`. A separate filter rather than
/// an `EnvFilter` directive, which a more specific directive (`lambda_runtime::x=trace`) would
/// override.
pub(crate) fn no_raw_events() -> FilterFn {
    FilterFn::new(is_not_raw_event as fn(&Metadata<'_>) -> bool)
}

fn is_not_raw_event(meta: &Metadata<'_>) -> bool {
    !(*meta.level() == tracing::Level::TRACE && meta.target().starts_with("lambda_runtime"))
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LogFormat {
    /// One flat JSON object per line (`AWS_LAMBDA_LOG_FORMAT=JSON`).
    Json,
    /// `tracing-subscriber`'s plain text (`AWS_LAMBDA_LOG_FORMAT=Text`).
    Text,
}

/// A logging set-up, read from the environment ([`Logging::from_env`]), adjusted, then
/// installed ([`Logging::init`]) or turned into a layer to combine with your own
/// ([`Logging::layer`]).
#[derive(Debug, Clone)]
pub struct Logging {
    format: Option<LogFormat>,
    default_format: LogFormat,
    directives: String,
    ceiling: Option<LevelFilter>,
    stderr: bool,
    ansi: bool,
    /// Settings that could not be read, logged once the subscriber is installed.
    notes: Vec<String>,
}

impl Logging {
    /// Reads `AWS_LAMBDA_LOG_FORMAT`, `AWS_LAMBDA_LOG_LEVEL` and `RUST_LOG` (see the
    /// [module docs](self)).
    pub fn from_env() -> Logging {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// As [`Logging::from_env`], reading each variable through `lookup`. An empty value counts
    /// as unset.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Logging {
        let get = |name: &str| {
            lookup(name)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let mut notes = Vec::new();
        let format = get("AWS_LAMBDA_LOG_FORMAT").and_then(|v| {
            if v.eq_ignore_ascii_case("json") {
                Some(LogFormat::Json)
            } else if v.eq_ignore_ascii_case("text") {
                Some(LogFormat::Text)
            } else {
                notes.push(format!(
                    "AWS_LAMBDA_LOG_FORMAT={v:?} is neither JSON nor Text; ignored"
                ));
                None
            }
        });
        let ceiling = get("AWS_LAMBDA_LOG_LEVEL").and_then(|v| match lambda_level(&v) {
            Some(level) => Some(level),
            None => {
                notes.push(format!(
                    "AWS_LAMBDA_LOG_LEVEL={v:?} is not one of TRACE, DEBUG, INFO, WARN, ERROR, \
                     FATAL; ignored"
                ));
                None
            }
        });
        let fallback = ceiling.map_or_else(|| "info".to_owned(), |l| l.to_string());
        let directives = match get("RUST_LOG") {
            Some(v) => match EnvFilter::builder().parse(&v) {
                Ok(_) => v,
                Err(e) => {
                    notes.push(format!(
                        "RUST_LOG={v:?} is not a valid filter ({e}); using {fallback}"
                    ));
                    fallback
                }
            },
            None => fallback,
        };
        Logging {
            format,
            default_format: LogFormat::Text,
            directives,
            ceiling,
            stderr: false,
            ansi: false,
            notes,
        }
    }

    /// The format when `AWS_LAMBDA_LOG_FORMAT` is unset. Default: [`LogFormat::Text`], as
    /// Lambda's own default.
    pub fn default_format(mut self, format: LogFormat) -> Self {
        self.default_format = format;
        self
    }

    /// Writes to stderr instead of stdout (a CLI whose stdout is its output).
    pub fn stderr(mut self) -> Self {
        self.stderr = true;
        self
    }

    /// Colours in the text format. Default: off (Lambda's log viewer shows escape codes as
    /// they are). Turn it on for a terminal.
    pub fn ansi(mut self, ansi: bool) -> Self {
        self.ansi = ansi;
        self
    }

    /// The format lines will be written in.
    pub(crate) fn format(&self) -> LogFormat {
        self.format.unwrap_or(self.default_format)
    }

    /// The set-up as a layer writing to stdout (or stderr), its filters included, to add to a
    /// registry beside layers of your own (OpenTelemetry, say).
    pub fn layer<S>(&self) -> Box<dyn Layer<S> + Send + Sync + 'static>
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        if self.stderr {
            self.layer_with_writer(std::io::stderr)
        } else {
            self.layer_with_writer(std::io::stdout)
        }
    }

    /// The set-up as a layer writing to `writer`.
    pub fn layer_with_writer<S, W>(&self, writer: W) -> Box<dyn Layer<S> + Send + Sync + 'static>
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
        W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
    {
        // Checked in `from_lookup`: nothing is dropped here.
        let env = EnvFilter::builder().parse_lossy(&self.directives);
        let ceiling = self.ceiling.unwrap_or(LevelFilter::TRACE);
        match self.format() {
            LogFormat::Json => tracing_subscriber::fmt::layer()
                .fmt_fields(JsonFields::new())
                .event_format(FlatJson)
                .with_writer(writer)
                .with_filter(KeepInfoSpans(env))
                .with_filter(no_raw_events())
                .with_filter(KeepInfoSpans(ceiling))
                .boxed(),
            LogFormat::Text => tracing_subscriber::fmt::layer()
                .with_ansi(self.ansi)
                .with_writer(writer)
                .with_filter(KeepInfoSpans(env))
                .with_filter(no_raw_events())
                .with_filter(KeepInfoSpans(ceiling))
                .boxed(),
        }
    }

    /// Installs the set-up as the global subscriber, then logs a warning for each setting that
    /// could not be read.
    ///
    /// Fails ([`ErrorKind::Config`]) if a global subscriber is already installed.
    pub fn init(self) -> Result<(), Error> {
        tracing_subscriber::registry()
            // Global, not only the layer's: a per-layer filter lets the event be built (its
            // fields evaluated) and then dropped, and building `lambda_runtime`'s raw-event
            // line fails, and stops its loop, on a payload that is not UTF-8.
            .with(no_raw_events())
            .with(self.layer())
            .try_init()
            .map_err(|e| {
                Error::with_source(
                    ErrorKind::Config,
                    "cannot install the log subscriber: one is already installed",
                    e,
                )
            })?;
        for note in &self.notes {
            tracing::warn!("{note}");
        }
        Ok(())
    }
}

/// A level filter that lets spans at INFO and above through whatever it says of events: under
/// `AWS_LAMBDA_LOG_LEVEL=WARN` a warning inside a handler must still carry its `message` and
/// `batch` spans' fields (those spans are INFO), or the one line written loses what names the
/// message. DEBUG and TRACE spans (the SDKs' and hyper's) stay filtered: they are many, and
/// their fields would crowd every line.
struct KeepInfoSpans<F>(F);

fn is_kept_span(meta: &Metadata<'_>) -> bool {
    meta.is_span() && *meta.level() <= tracing::Level::INFO
}

impl<S, F: Filter<S>> Filter<S> for KeepInfoSpans<F> {
    fn enabled(&self, meta: &Metadata<'_>, cx: &Context<'_, S>) -> bool {
        is_kept_span(meta) || self.0.enabled(meta, cx)
    }

    fn callsite_enabled(&self, meta: &'static Metadata<'static>) -> Interest {
        if is_kept_span(meta) {
            Interest::always()
        } else {
            self.0.callsite_enabled(meta)
        }
    }

    fn event_enabled(&self, event: &Event<'_>, cx: &Context<'_, S>) -> bool {
        self.0.event_enabled(event, cx)
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        self.0.max_level_hint().map(|l| l.max(LevelFilter::INFO))
    }

    // Forwarded: an `EnvFilter` tracks spans for its span-field directives.
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        cx: Context<'_, S>,
    ) {
        self.0.on_new_span(attrs, id, cx)
    }

    fn on_record(
        &self,
        id: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        cx: Context<'_, S>,
    ) {
        self.0.on_record(id, values, cx)
    }

    fn on_enter(&self, id: &tracing::span::Id, cx: Context<'_, S>) {
        self.0.on_enter(id, cx)
    }

    fn on_exit(&self, id: &tracing::span::Id, cx: Context<'_, S>) {
        self.0.on_exit(id, cx)
    }

    fn on_close(&self, id: tracing::span::Id, cx: Context<'_, S>) {
        self.0.on_close(id, cx)
    }
}

/// Lambda's level names (`FATAL` is tracing's `ERROR`), in any case.
fn lambda_level(v: &str) -> Option<LevelFilter> {
    if v.eq_ignore_ascii_case("fatal") {
        return Some(LevelFilter::ERROR);
    }
    LevelFilter::from_str(v)
        .ok()
        .filter(|l| *l != LevelFilter::OFF)
}

/// The JSON event format: the fixed members first, then the event's fields and its spans'
/// fields in one flat object.
struct FlatJson;

/// Members no field may overwrite.
const FIXED: [&str; 4] = ["timestamp", "level", "message", "target"];

impl<S, N> FormatEvent<S, N> for FlatJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'w> FormatFields<'w> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let mut fields = Map::new();
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                let extensions = span.extensions();
                // The layer stores span fields as a JSON object (`JsonFields`).
                if let Some(stored) = extensions.get::<FormattedFields<N>>()
                    && let Ok(Value::Object(span_fields)) = serde_json::from_str(stored)
                {
                    fields.extend(span_fields);
                }
            }
        }
        let mut message = None;
        event.record(&mut Fields {
            fields: &mut fields,
            message: &mut message,
        });
        let mut timestamp = String::new();
        tracing_subscriber::fmt::time::SystemTime.format_time(&mut Writer::new(&mut timestamp))?;

        let mut line = Map::new();
        line.insert("timestamp".into(), Value::String(timestamp));
        line.insert("level".into(), Value::String(meta.level().to_string()));
        line.insert("message".into(), Value::String(message.unwrap_or_default()));
        line.insert("target".into(), Value::String(meta.target().to_owned()));
        let fixed = serde_json::to_string(&line).map_err(|_| fmt::Error)?;
        fields.retain(|k, _| !FIXED.contains(&k.as_str()));
        // The fixed members first (readable in a console), then the rest: two objects joined.
        if fields.is_empty() {
            return writeln!(writer, "{fixed}");
        }
        let rest = serde_json::to_string(&fields).map_err(|_| fmt::Error)?;
        writeln!(writer, "{},{}", &fixed[..fixed.len() - 1], &rest[1..])
    }
}

/// Records an event's fields as JSON values; its `message` apart.
struct Fields<'a> {
    fields: &'a mut Map<String, Value>,
    message: &'a mut Option<String>,
}

impl Fields<'_> {
    fn put(&mut self, field: &Field, value: Value) {
        if field.name() == "message" {
            *self.message = Some(match value {
                Value::String(s) => s,
                other => other.to_string(),
            });
        } else {
            self.fields.insert(field.name().to_owned(), value);
        }
    }
}

impl Visit for Fields<'_> {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, serde_json::json!(value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, Value::from(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, Value::from(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, Value::Bool(value));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, Value::String(value.to_owned()));
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.put(field, Value::String(value.to_string()));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, Value::String(format!("{value:?}")));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(vars: &[(&str, &str)]) -> Logging {
        Logging::from_lookup(|name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        })
    }

    #[test]
    fn lambda_controls_then_rust_log() {
        let l = from(&[]);
        assert_eq!(
            (l.format(), l.directives.as_str(), l.ceiling),
            (LogFormat::Text, "info", None)
        );
        assert_eq!(
            from(&[]).default_format(LogFormat::Json).format(),
            LogFormat::Json
        );

        let l = from(&[
            ("AWS_LAMBDA_LOG_FORMAT", "JSON"),
            ("AWS_LAMBDA_LOG_LEVEL", "WARN"),
        ]);
        assert_eq!(l.format(), LogFormat::Json);
        assert_eq!(l.directives, "warn");
        assert_eq!(l.ceiling, Some(LevelFilter::WARN));
        // The environment's format wins over the caller's default.
        let l = from(&[("AWS_LAMBDA_LOG_FORMAT", "Text")]).default_format(LogFormat::Json);
        assert_eq!(l.format(), LogFormat::Text);

        // RUST_LOG is the filter; Lambda's level stays the ceiling.
        let l = from(&[
            ("AWS_LAMBDA_LOG_LEVEL", "info"),
            ("RUST_LOG", "sqs_claim=debug,warn"),
        ]);
        assert_eq!(l.directives, "sqs_claim=debug,warn");
        assert_eq!(l.ceiling, Some(LevelFilter::INFO));
        assert_eq!(
            from(&[("AWS_LAMBDA_LOG_LEVEL", "FATAL")]).ceiling,
            Some(LevelFilter::ERROR)
        );
    }

    #[test]
    fn unreadable_settings_are_ignored_and_noted() {
        let l = from(&[
            ("AWS_LAMBDA_LOG_FORMAT", "xml"),
            ("AWS_LAMBDA_LOG_LEVEL", "loud"),
            ("RUST_LOG", "sqs_claim=lots"),
        ]);
        assert_eq!(l.format(), LogFormat::Text);
        assert_eq!(l.ceiling, None);
        assert_eq!(l.directives, "info");
        assert_eq!(l.notes.len(), 3, "{:?}", l.notes);
        assert!(l.notes.iter().any(|n| n.contains("RUST_LOG")));
        // An empty value is unset, not an error.
        assert!(
            from(&[("RUST_LOG", " "), ("AWS_LAMBDA_LOG_LEVEL", "")])
                .notes
                .is_empty()
        );
    }
}
