//! The function timeout and the SQS event's settings, and every stream event's (Kinesis,
//! DynamoDB, MSK, SelfManagedKafka), read from a SAM template (`template.yaml`) when no Lambda
//! API answers.
//!
//! The YAML is read with `saphyr`, which keeps CloudFormation's short tags (`!Ref`, `!GetAtt`,
//! ...) as tagged nodes, where serde-based YAML crates either refuse unknown tags or drop them
//! and leave a `!Ref FunctionTimeout` indistinguishable from the string `FunctionTimeout`.
//! Only what a deployment fixes without evaluation is read: a literal, or a `!Ref` (short or
//! long form) to a parameter, whose `Default` is taken (the value deployed if no override was
//! given: the report says so, and a flag gives the real one). Anything else (`!If`,
//! `!FindInMap`, ...) is unknown and its rules skip.

use std::path::Path;

use saphyr::{LoadableYamlNode, Scalar, Yaml};
use sqs_claim::{Error, ErrorKind};

use super::facts::{FunctionFacts, Known, StreamFacts, StreamSource};

/// SAM's function timeout when neither the function nor `Globals` sets one.
const SAM_DEFAULT_TIMEOUT_SECS: u64 = 3;
/// Lambda's batch size for an SQS event source when none is set.
const DEFAULT_BATCH_SIZE: u64 = 10;

/// Reads the one `AWS::Serverless::Function` with an SQS event in the template at `path`.
pub(super) fn read(path: &Path) -> Result<FunctionFacts, Error> {
    let shown = path.display();
    let text = std::fs::read_to_string(path)
        .map_err(|e| bad(format!("cannot read template {shown}: {e}")))?;
    from_text(&text).map_err(|why| bad(format!("template {shown}: {why}")))
}

fn bad(message: String) -> Error {
    Error::new(ErrorKind::Config, message)
}

/// A YAML node, as the lookups below see it: tags kept.
fn get<'a>(node: &'a Yaml<'a>, key: &str) -> Option<&'a Yaml<'a>> {
    match node {
        Yaml::Mapping(map) => map
            .iter()
            .find(|(k, _)| as_str(k) == Some(key))
            .map(|(_, v)| v),
        _ => None,
    }
}

fn as_str<'a>(node: &'a Yaml<'a>) -> Option<&'a str> {
    match node {
        Yaml::Value(Scalar::String(s)) => Some(s.as_ref()),
        Yaml::Representation(s, _, _) => Some(s.as_ref()),
        _ => None,
    }
}

fn from_text(text: &str) -> Result<FunctionFacts, String> {
    let docs = Yaml::load_from_str(text).map_err(|e| format!("not YAML: {e}"))?;
    let doc = docs.first().ok_or("empty")?;
    let resources = match get(doc, "Resources") {
        Some(Yaml::Mapping(map)) => map,
        _ => return Err("no Resources".into()),
    };
    let mut found = Vec::new();
    let mut streams = Vec::new();
    for (id, resource) in resources {
        if get(resource, "Type").and_then(as_str) != Some("AWS::Serverless::Function") {
            continue;
        }
        let Some(Yaml::Mapping(events)) =
            get(resource, "Properties").and_then(|p| get(p, "Events"))
        else {
            continue;
        };
        for (event_id, event) in events {
            let name = format!(
                "{}.{}",
                as_str(id).unwrap_or("?"),
                as_str(event_id).unwrap_or("?")
            );
            match get(event, "Type").and_then(as_str) {
                Some("SQS") => found.push((name, resource, event)),
                Some(kind) => {
                    if let Some(source) = stream_source(kind) {
                        streams.push(stream_event(doc, source, &name, event)?);
                    }
                }
                None => {}
            }
        }
    }
    let (name, function, event) = match found.as_slice() {
        [one] => one.clone(),
        // A stream consumer: the stream rules read its events.
        [] if !streams.is_empty() => {
            return Ok(FunctionFacts {
                streams,
                notes: vec![
                    "template: no SQS event, only stream events (the stream-* rules)".into(),
                ],
                ..FunctionFacts::default()
            });
        }
        [] => return Err("no AWS::Serverless::Function with an SQS event".into()),
        several => {
            let names: Vec<&str> = several.iter().map(|(n, _, _)| n.as_str()).collect();
            return Err(format!(
                "{} SQS events ({}): give the function's values as flags instead",
                names.len(),
                names.join(", ")
            ));
        }
    };
    let function_id = name.split('.').next().unwrap_or(&name).to_owned();
    let event_props = get(event, "Properties");
    let mut notes = Vec::new();
    // A value written some way the doctor does not evaluate is unknown (its rules skip, the
    // note says why); one that is not a number at all is a broken template.
    let mut resolve = |node: Option<&Yaml>, what: String, default: (u64, &str)| match node {
        None => Ok(Some(Known::new(default.0, default.1))),
        Some(node) => match number(doc, node, &what) {
            Ok(known) => Ok(Some(known)),
            Err(Unknown::Unsupported(why)) => {
                notes.push(why);
                Ok(None)
            }
            Err(Unknown::Invalid(why)) => Err(why),
        },
    };
    // The function's Timeout, else Globals.Function's, else SAM's default.
    let timeout = get(function, "Properties").and_then(|p| get(p, "Timeout"));
    let globals = get(doc, "Globals")
        .and_then(|g| get(g, "Function"))
        .and_then(|f| get(f, "Timeout"));
    let (node, what) = match (timeout, globals) {
        (Some(n), _) => (Some(n), format!("{function_id} Timeout")),
        (None, Some(n)) => (Some(n), "Globals.Function.Timeout".to_owned()),
        (None, None) => (None, String::new()),
    };
    let timeout_secs = resolve(
        node,
        what,
        (
            SAM_DEFAULT_TIMEOUT_SECS,
            "template: no Timeout, SAM's default",
        ),
    )?;
    let batch_size = resolve(
        event_props.and_then(|p| get(p, "BatchSize")),
        format!("{name} BatchSize"),
        (
            DEFAULT_BATCH_SIZE,
            "template: no BatchSize, Lambda's default",
        ),
    )?;
    let batching_window_secs = resolve(
        event_props.and_then(|p| get(p, "MaximumBatchingWindowInSeconds")),
        format!("{name} MaximumBatchingWindowInSeconds"),
        (0, "template: no MaximumBatchingWindowInSeconds, so 0"),
    )?;
    let rbif = match event_props.and_then(|p| get(p, "FunctionResponseTypes")) {
        None => Some(false),
        Some(Yaml::Sequence(items)) => Some(
            items
                .iter()
                .any(|t| as_str(t) == Some("ReportBatchItemFailures")),
        ),
        Some(_) => {
            notes.push(format!(
                "template: {name} FunctionResponseTypes is not a plain list"
            ));
            None
        }
    };
    Ok(FunctionFacts {
        timeout_secs,
        report_batch_item_failures: rbif
            .map(|v| Known::new(v, format!("template: {name} FunctionResponseTypes"))),
        batch_size,
        batching_window_secs,
        no_mapping: None,
        streams,
        notes,
    })
}

/// The stream an event `Type` reads, `None` for an event that is not a stream's.
fn stream_source(kind: &str) -> Option<StreamSource> {
    match kind {
        "Kinesis" => Some(StreamSource::Kinesis),
        "DynamoDB" => Some(StreamSource::DynamoDbStreams),
        "MSK" | "SelfManagedKafka" => Some(StreamSource::Kafka),
        _ => None,
    }
}

/// A stream event's settings, with what SAM and Lambda use when one is not written (`-1`
/// for the age and the retries, no bisection, no destination); a value written with an
/// intrinsic the doctor does not evaluate is unknown. The Kinesis stream's retention is read
/// when `Stream` is `!GetAtt RESOURCE.Arn` of an `AWS::Kinesis::Stream` in the template.
fn stream_event(
    doc: &Yaml,
    source: StreamSource,
    name: &str,
    event: &Yaml,
) -> Result<StreamFacts, String> {
    let props = get(event, "Properties");
    let prop = |key: &str| props.and_then(|p| get(p, key));
    let mut facts = StreamFacts::new(source, format!("template: {name}"));
    let not_set = |what: &str| format!("template: {name} has no {what}, Lambda's default");
    let kafka = source == StreamSource::Kafka;
    let signed = |key: &str| -> Result<Option<Known<i64>>, String> {
        match prop(key) {
            None if kafka => Ok(None),
            None => Ok(Some(Known::new(-1, not_set(key)))),
            Some(node) => match integer(doc, node, &format!("{name} {key}")) {
                Ok(known) => Ok(Some(known)),
                Err(Unknown::Unsupported(_)) => Ok(None),
                Err(Unknown::Invalid(why)) => Err(why),
            },
        }
    };
    facts.maximum_record_age_secs = signed("MaximumRecordAgeInSeconds")?;
    facts.maximum_retry_attempts = signed("MaximumRetryAttempts")?;
    let key = "BisectBatchOnFunctionError";
    facts.bisect_on_error = match prop(key) {
        None if kafka => None,
        None => Some(Known::new(false, not_set(key))),
        Some(node) => boolean(node).map(|v| Known::new(v, format!("template: {name} {key}"))),
    };
    let key = "ParallelizationFactor";
    facts.parallelization_factor = match prop(key) {
        None if kafka => None,
        None => Some(Known::new(1, not_set(key))),
        Some(node) => number(doc, node, &format!("{name} {key}")).ok(),
    };
    facts.report_batch_item_failures = match prop("FunctionResponseTypes") {
        None => Some(false),
        Some(Yaml::Sequence(items)) => Some(
            items
                .iter()
                .any(|t| as_str(t) == Some("ReportBatchItemFailures")),
        ),
        Some(_) => None,
    }
    .map(|v| Known::new(v, format!("template: {name} FunctionResponseTypes")));
    let destination = prop("DestinationConfig")
        .and_then(|d| get(d, "OnFailure"))
        .and_then(|f| get(f, "Destination"))
        .map(shown);
    facts.on_failure = Some(Known::new(
        destination,
        format!("template: {name} DestinationConfig"),
    ));
    if source == StreamSource::Kinesis
        && let Some(stream) = prop("Stream").and_then(get_att_resource)
        && let Some(resource) = get(doc, "Resources").and_then(|r| get(r, stream))
        && get(resource, "Type").and_then(as_str) == Some("AWS::Kinesis::Stream")
    {
        let hours = get(resource, "Properties").and_then(|p| get(p, "RetentionPeriodHours"));
        facts.retention_secs = match hours {
            None => Some(Known::new(
                24 * 3600,
                format!("template: {stream} has no RetentionPeriodHours, so 24 h"),
            )),
            Some(node) => number(doc, node, &format!("{stream} RetentionPeriodHours"))
                .ok()
                .map(|k| Known::new(k.value.saturating_mul(3600), k.source)),
        };
    }
    Ok(facts)
}

/// `RESOURCE` of `!GetAtt RESOURCE.Attr` (short or long form).
fn get_att_resource<'a>(node: &'a Yaml<'a>) -> Option<&'a str> {
    let target = match node {
        Yaml::Tagged(tag, inner) if tag.suffix == "GetAtt" => as_str(inner),
        Yaml::Mapping(map) if map.len() == 1 => match get(node, "Fn::GetAtt") {
            Some(Yaml::Sequence(items)) => items.first().and_then(as_str),
            Some(other) => as_str(other),
            None => None,
        },
        _ => None,
    }?;
    Some(target.split('.').next().unwrap_or(target))
}

/// A value as the report shows it: a string as is, `!Tag value` for a short-form intrinsic.
fn shown(node: &Yaml) -> String {
    match node {
        Yaml::Tagged(tag, inner) => format!("!{} {}", tag.suffix, shown(inner)),
        other => as_str(other).map_or_else(|| "(an intrinsic function)".to_owned(), str::to_owned),
    }
}

/// A literal `true`/`false` (or its string).
fn boolean(node: &Yaml) -> Option<bool> {
    match node {
        Yaml::Value(Scalar::Boolean(b)) => Some(*b),
        other => match as_str(other).map(str::trim) {
            Some("true" | "True" | "TRUE") => Some(true),
            Some("false" | "False" | "FALSE") => Some(false),
            _ => None,
        },
    }
}

/// Why a value is unknown.
enum Unknown {
    /// Written with an intrinsic the doctor does not evaluate: skip its rules.
    Unsupported(String),
    /// Not a number at all: the template is wrong.
    Invalid(String),
}

/// A whole number written as a literal or a `!Ref` to a parameter with a `Default`.
fn number(doc: &Yaml, node: &Yaml, what: &str) -> Result<Known<u64>, Unknown> {
    let known = integer(doc, node, what)?;
    match u64::try_from(known.value) {
        Ok(value) => Ok(Known::new(value, known.source)),
        Err(_) => Err(Unknown::Invalid(format!(
            "template: {what} is not a whole number"
        ))),
    }
}

/// An integer (`-1` included) written as a literal or a `!Ref` to a parameter with a
/// `Default`.
fn integer(doc: &Yaml, node: &Yaml, what: &str) -> Result<Known<i64>, Unknown> {
    if let Some(param) = reference(node) {
        let default = get(doc, "Parameters")
            .and_then(|p| get(p, param))
            .and_then(|p| get(p, "Default"));
        return match default {
            Some(d) => literal(d)
                .map(|v| {
                    Known::new(
                        v,
                        format!("template: {what} = !Ref {param}, the parameter's Default"),
                    )
                })
                .ok_or_else(|| {
                    Unknown::Invalid(format!(
                        "template: parameter {param}'s Default is not a whole number"
                    ))
                }),
            None => Err(Unknown::Unsupported(format!(
                "template: {what} is !Ref {param}, which has no Default"
            ))),
        };
    }
    if let Some(v) = literal(node) {
        return Ok(Known::new(v, format!("template: {what}")));
    }
    match node {
        Yaml::Tagged(tag, _) => Err(Unknown::Unsupported(format!(
            "template: {what} is written with !{}, which the doctor does not evaluate",
            tag.suffix
        ))),
        Yaml::Mapping(_) => Err(Unknown::Unsupported(format!(
            "template: {what} is an intrinsic function the doctor does not evaluate"
        ))),
        _ => Err(Unknown::Invalid(format!(
            "template: {what} is not a whole number"
        ))),
    }
}

/// `!Ref NAME` or `{Ref: NAME}`, to a parameter (not a pseudo parameter).
fn reference<'a>(node: &'a Yaml<'a>) -> Option<&'a str> {
    let name = match node {
        Yaml::Tagged(tag, inner) if tag.suffix == "Ref" => as_str(inner),
        Yaml::Mapping(map) if map.len() == 1 => get(node, "Ref").and_then(as_str),
        _ => None,
    }?;
    (!name.starts_with("AWS::")).then_some(name)
}

fn literal(node: &Yaml) -> Option<i64> {
    match node {
        Yaml::Value(Scalar::Integer(i)) => Some(*i),
        Yaml::Value(Scalar::String(s)) => s.trim().parse().ok(),
        Yaml::Representation(s, _, _) => s.trim().parse().ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_streams_template_gives_each_stream_event_s_settings() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../examples/streams/template.yaml");
        let text = std::fs::read_to_string(path).expect("examples/streams/template.yaml");
        let facts = from_text(&text).expect("a template with stream events");
        let sources: Vec<StreamSource> = facts.streams.iter().map(|s| s.source).collect();
        assert_eq!(
            sources,
            [StreamSource::Kinesis, StreamSource::DynamoDbStreams],
            "{facts:?}"
        );
        for s in &facts.streams {
            assert_eq!(s.maximum_retry_attempts.as_ref().map(|k| k.value), Some(10));
            assert_eq!(
                s.maximum_record_age_secs.as_ref().map(|k| k.value),
                Some(21_600)
            );
            assert_eq!(s.bisect_on_error.as_ref().map(|k| k.value), Some(true));
            assert_eq!(
                s.report_batch_item_failures.as_ref().map(|k| k.value),
                Some(true)
            );
            let destination = s.on_failure.as_ref().and_then(|k| k.value.clone());
            assert_eq!(
                destination.as_deref(),
                Some("!GetAtt StreamFailures.Arn"),
                "{s:?}"
            );
            // Kinesis: the stream resource's RetentionPeriodHours; DynamoDB Streams: 24 h.
            assert_eq!(s.retention_secs.as_ref().map(|k| k.value), Some(86_400));
        }
        // Nothing written: Lambda's defaults, said as such.
        let bare = text
            .replace("BisectBatchOnFunctionError: true", "")
            .replace("MaximumRetryAttempts: !Ref MaximumRetryAttempts", "")
            .replace(
                "MaximumRecordAgeInSeconds: !Ref MaximumRecordAgeInSeconds",
                "",
            );
        let facts = from_text(&bare).expect("a template");
        let s = &facts.streams[0];
        assert_eq!(s.maximum_retry_attempts.as_ref().map(|k| k.value), Some(-1));
        assert_eq!(s.bisect_on_error.as_ref().map(|k| k.value), Some(false));
        assert!(
            s.bisect_on_error
                .as_ref()
                .is_some_and(|k| k.source.contains("Lambda's default")),
            "{s:?}"
        );
    }
}
