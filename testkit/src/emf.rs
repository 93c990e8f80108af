//! A checker for CloudWatch Embedded Metric Format objects, after the specification's rules
//! (docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html).
//!
//! CloudWatch drops an invalid EMF line silently (it stays a log line, no metric is made), so a
//! consumer that emits metrics wants its lines checked in a test: one line each, an `_aws`
//! object with a millisecond `Timestamp` and `CloudWatchMetrics` directives, every dimension a
//! top-level string, every metric a top-level number (or 1 to 100 of them), units CloudWatch
//! knows, at most 30 dimensions and 100 metrics.
//!
//! ```
//! use sqs_claim_testkit::emf;
//!
//! let line = r#"{"_aws":{"Timestamp":1732000000000,"CloudWatchMetrics":[{"Namespace":"orders",
//! "Dimensions":[["Service"]],"Metrics":[{"Name":"Processed","Unit":"Count"}]}]},
//! "Service":"consumer","Processed":3}"#.replace('\n', "");
//! assert!(emf::problems(&line).is_empty());
//!
//! // Found in a function's output: every EMF line checked, the others skipped.
//! let logs = format!("{{\"level\":\"INFO\"}}\n{line}\n");
//! let metrics = emf::lines(&logs);
//! assert_eq!(metrics[0]["Processed"], 3);
//!
//! assert_eq!(
//!     emf::problems(r#"{"_aws":{"Timestamp":1732000000000,"CloudWatchMetrics":[]}}"#),
//!     ["_aws.CloudWatchMetrics is empty"]
//! );
//! ```

use serde_json::Value;

/// The units CloudWatch accepts.
pub const UNITS: &[&str] = &[
    "Seconds",
    "Microseconds",
    "Milliseconds",
    "Bytes",
    "Kilobytes",
    "Megabytes",
    "Gigabytes",
    "Terabytes",
    "Bits",
    "Kilobits",
    "Megabits",
    "Gigabits",
    "Terabits",
    "Percent",
    "Count",
    "Bytes/Second",
    "Kilobytes/Second",
    "Megabytes/Second",
    "Gigabytes/Second",
    "Terabytes/Second",
    "Bits/Second",
    "Kilobits/Second",
    "Megabits/Second",
    "Gigabits/Second",
    "Terabits/Second",
    "Count/Second",
    "None",
];

/// Every rule of the specification this line must keep, as a list of what is wrong (empty:
/// valid). `line` is the text of one log line.
pub fn problems(line: &str) -> Vec<String> {
    let mut p = Vec::new();
    if line.contains('\n') {
        p.push("an EMF object must be one line".into());
    }
    let root: Value = match serde_json::from_str(line) {
        Ok(v) => v,
        Err(e) => return vec![format!("not JSON: {e}")],
    };
    let Some(root) = root.as_object() else {
        return vec!["the root is not an object".into()];
    };
    let Some(aws) = root.get("_aws").and_then(Value::as_object) else {
        return vec!["no _aws object".into()];
    };
    match aws.get("Timestamp").and_then(Value::as_u64) {
        // Milliseconds since the epoch: after 2020 and before 2100.
        Some(ms) if (1_577_836_800_000..4_102_444_800_000).contains(&ms) => {}
        other => p.push(format!(
            "_aws.Timestamp is not epoch milliseconds: {other:?}"
        )),
    }
    let Some(directives) = aws.get("CloudWatchMetrics").and_then(Value::as_array) else {
        p.push("no _aws.CloudWatchMetrics array".into());
        return p;
    };
    if directives.is_empty() {
        p.push("_aws.CloudWatchMetrics is empty".into());
    }
    for (i, d) in directives.iter().enumerate() {
        let at = format!("CloudWatchMetrics[{i}]");
        match d["Namespace"].as_str() {
            Some(ns) if !ns.is_empty() && ns.len() <= 255 => {}
            other => p.push(format!(
                "{at}.Namespace must be 1-255 characters: {other:?}"
            )),
        }
        match d["Dimensions"].as_array() {
            None => p.push(format!("{at}.Dimensions is not an array")),
            Some(sets) => {
                for set in sets {
                    let Some(names) = set.as_array() else {
                        p.push(format!("{at}: a dimension set is not an array"));
                        continue;
                    };
                    if names.len() > 30 {
                        p.push(format!("{at}: a dimension set has more than 30 dimensions"));
                    }
                    for name in names {
                        let Some(name) = name.as_str() else {
                            p.push(format!("{at}: a dimension name is not a string"));
                            continue;
                        };
                        match root.get(name).and_then(Value::as_str) {
                            Some(v) if !v.is_empty() && v.len() <= 1024 => {}
                            other => p.push(format!(
                                "dimension {name:?} needs a top-level string value, found {other:?}"
                            )),
                        }
                    }
                }
            }
        }
        let Some(metrics) = d["Metrics"].as_array() else {
            p.push(format!("{at}.Metrics is not an array"));
            continue;
        };
        if metrics.len() > 100 {
            p.push(format!("{at}: more than 100 metrics"));
        }
        let mut seen = std::collections::HashSet::new();
        for m in metrics {
            let Some(name) = m["Name"]
                .as_str()
                .filter(|n| !n.is_empty() && n.len() <= 1024)
            else {
                p.push(format!("{at}: a metric without a valid Name: {m}"));
                continue;
            };
            if !seen.insert(name) {
                p.push(format!("metric {name:?} declared twice"));
            }
            if let Some(unit) = m.get("Unit")
                && !unit.as_str().is_some_and(|u| UNITS.contains(&u))
            {
                p.push(format!(
                    "metric {name:?}: unit {unit} is not a CloudWatch unit"
                ));
            }
            match root.get(name) {
                Some(Value::Number(_)) => {}
                Some(Value::Array(values)) => {
                    if values.is_empty() || values.len() > 100 {
                        p.push(format!(
                            "metric {name:?}: 1 to 100 values, found {}",
                            values.len()
                        ));
                    }
                    if !values.iter().all(Value::is_number) {
                        p.push(format!("metric {name:?}: a value is not a number"));
                    }
                }
                other => p.push(format!(
                    "metric {name:?} needs a top-level number or array of numbers, found {other:?}"
                )),
            }
        }
    }
    p
}

/// The lines of `text` that are EMF objects (those with an `_aws` member), each checked.
///
/// # Panics
///
/// On an invalid EMF line, naming its problems (a test assertion).
pub fn lines(text: &str) -> Vec<Value> {
    text.lines()
        .filter(|l| l.contains("\"_aws\""))
        .map(|l| {
            let problems = problems(l);
            assert!(
                problems.is_empty(),
                "invalid EMF line {l}:\n{}",
                problems.join("\n")
            );
            match serde_json::from_str(l) {
                Ok(value) => value,
                Err(e) => panic!("invalid EMF line {l}: {e}"),
            }
        })
        .collect()
}
