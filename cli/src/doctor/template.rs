//! The function timeout and the SQS event's settings, read from a SAM template
//! (`template.yaml`) when no Lambda API answers.
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

use super::facts::{FunctionFacts, Known};

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
            if get(event, "Type").and_then(as_str) == Some("SQS") {
                let name = format!(
                    "{}.{}",
                    as_str(id).unwrap_or("?"),
                    as_str(event_id).unwrap_or("?")
                );
                found.push((name, resource, event));
            }
        }
    }
    let (name, function, event) = match found.as_slice() {
        [one] => one.clone(),
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
        notes,
    })
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

fn literal(node: &Yaml) -> Option<u64> {
    match node {
        Yaml::Value(Scalar::Integer(i)) => u64::try_from(*i).ok(),
        Yaml::Value(Scalar::String(s)) => s.trim().parse().ok(),
        Yaml::Representation(s, _, _) => s.trim().parse().ok(),
        _ => None,
    }
}
