//! `template.yaml` (AWS SAM): the rules an SQS-driven Lambda must keep, checked on the real
//! template, and each check proven able to fail by mutating the template text.
//!
//! The YAML is read with `saphyr`, which keeps CloudFormation's short tags (`!Ref`, `!GetAtt`,
//! `!Sub`, ...) as tagged nodes; they are turned into their long forms (`{"Ref": ..}`,
//! `{"Fn::GetAtt": [..]}`) so the checks read one shape. `cfn-lint template.yaml` (run by
//! `make lint`) validates the template against the CloudFormation specification; these tests
//! check what a linter cannot know: the rules of this design.

use std::collections::BTreeMap;
use std::path::Path;

use saphyr::{LoadableYamlNode, Scalar, Yaml};
use serde_json::{Map, Value, json};

/// The factor AWS advises between the queue's visibility timeout and the function timeout.
const VISIBILITY_FACTOR: i64 = 6;
/// The fewest receives before the dead-letter queue that AWS advises.
const MIN_MAX_RECEIVE_COUNT: i64 = 5;
/// Dead-letter queue retention: 14 days, the maximum.
const DLQ_RETENTION_SECS: i64 = 14 * 24 * 3600;
/// SAM's default function timeout, when a function sets none.
const SAM_DEFAULT_TIMEOUT: i64 = 3;
/// SQS's default visibility timeout, when a queue sets none.
const SQS_DEFAULT_VISIBILITY: i64 = 30;

fn template_text() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../template.yaml");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

// ---------------------------------------------------------------------------------------------
// YAML (with CloudFormation tags) to JSON

fn to_json(node: &Yaml) -> Result<Value, String> {
    Ok(match node {
        Yaml::Value(s) => scalar(s),
        Yaml::Representation(text, _, _) => Value::String(text.to_string()),
        Yaml::Sequence(items) => Value::Array(items.iter().map(to_json).collect::<Result<_, _>>()?),
        Yaml::Mapping(map) => {
            let mut out = Map::new();
            for (k, v) in map {
                let key = match to_json(k)? {
                    Value::String(s) => s,
                    other => other.to_string(),
                };
                out.insert(key, to_json(v)?);
            }
            Value::Object(out)
        }
        Yaml::Tagged(tag, inner) => {
            let value = to_json(inner)?;
            let name = tag.suffix.as_str();
            match name {
                "Ref" | "Condition" => json!({ name: value }),
                // `!GetAtt A.B` is `{"Fn::GetAtt": ["A", "B"]}`.
                "GetAtt" => match value {
                    Value::String(s) => {
                        let (resource, attribute) = s
                            .split_once('.')
                            .ok_or_else(|| format!("!GetAtt {s}: expected Resource.Attribute"))?;
                        json!({ "Fn::GetAtt": [resource, attribute] })
                    }
                    other => json!({ "Fn::GetAtt": other }),
                },
                _ => json!({ format!("Fn::{name}"): value }),
            }
        }
        Yaml::Alias(_) => return Err("YAML aliases are not used in templates".into()),
        Yaml::BadValue => return Err("a YAML value could not be read".into()),
    })
}

fn scalar(s: &Scalar) -> Value {
    match s {
        Scalar::Null => Value::Null,
        Scalar::Boolean(b) => json!(b),
        Scalar::Integer(i) => json!(i),
        Scalar::FloatingPoint(f) => json!(f.into_inner()),
        Scalar::String(s) => json!(s.as_ref()),
    }
}

fn parse(text: &str) -> Result<Value, String> {
    let docs = Yaml::load_from_str(text).map_err(|e| format!("template is not YAML: {e}"))?;
    let doc = docs.first().ok_or("template is empty")?;
    to_json(doc)
}

// ---------------------------------------------------------------------------------------------
// A small evaluator for the intrinsics a number can be written with

/// Every combination of values the parameters may take (`AllowedValues`, else the `Default`,
/// `MinValue` and `MaxValue` given): a rule holds if it holds for each, for the monotonic
/// expressions a template uses for timeouts and counts.
fn candidates(t: &Value, param: &str) -> Result<Vec<Value>, String> {
    let p = t["Parameters"]
        .get(param)
        .ok_or_else(|| format!("!Ref {param}: no such parameter"))?;
    if let Some(allowed) = p["AllowedValues"].as_array() {
        return Ok(allowed.clone());
    }
    if p.get("MinValue").is_none() && p.get("MaxValue").is_none() {
        return Err(format!(
            "parameter {param} has neither AllowedValues nor MinValue/MaxValue: any value is \
             possible, so the rule cannot be proven"
        ));
    }
    Ok(["MinValue", "Default", "MaxValue"]
        .iter()
        .filter_map(|k| p.get(*k).cloned())
        .collect())
}

/// The parameters an expression refers to.
fn refs(expr: &Value, out: &mut Vec<String>) {
    match expr {
        Value::Object(m) => {
            if let Some(Value::String(r)) = m.get("Ref")
                && !r.starts_with("AWS::")
                && !out.contains(r)
            {
                out.push(r.clone());
            }
            m.values().for_each(|v| refs(v, out));
        }
        Value::Array(a) => a.iter().for_each(|v| refs(v, out)),
        _ => {}
    }
}

fn as_string(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn eval(t: &Value, expr: &Value, params: &BTreeMap<String, Value>) -> Result<Value, String> {
    match expr {
        Value::Object(m) if m.contains_key("Ref") => {
            let name = m["Ref"].as_str().unwrap_or("");
            params
                .get(name)
                .cloned()
                .ok_or_else(|| format!("!Ref {name}: not a parameter with known values"))
        }
        Value::Object(m) if m.contains_key("Fn::FindInMap") => {
            let args = m["Fn::FindInMap"]
                .as_array()
                .ok_or("FindInMap takes a list")?;
            let keys = args
                .iter()
                .map(|a| {
                    eval(t, a, params)
                        .and_then(|v| as_string(&v).ok_or("a map key must be a string".into()))
                })
                .collect::<Result<Vec<_>, String>>()?;
            let [map, k1, k2] = keys.as_slice() else {
                return Err("FindInMap takes three arguments".into());
            };
            t["Mappings"][map.as_str()][k1.as_str()]
                .get(k2.as_str())
                .cloned()
                .ok_or_else(|| format!("mapping {map} has no entry {k1}.{k2}"))
        }
        Value::Object(_) => Err(format!("cannot evaluate {expr}")),
        other => Ok(other.clone()),
    }
}

fn eval_number(t: &Value, expr: &Value, params: &BTreeMap<String, Value>) -> Result<i64, String> {
    let v = eval(t, expr, params)?;
    as_string(&v)
        .and_then(|s| s.parse::<i64>().ok())
        .ok_or_else(|| format!("{expr} is {v}, not a whole number"))
}

/// Every assignment of candidate values to the parameters the expressions refer to.
fn scenarios(t: &Value, exprs: &[&Value]) -> Result<Vec<BTreeMap<String, Value>>, String> {
    let mut names = Vec::new();
    exprs.iter().for_each(|e| refs(e, &mut names));
    let mut out = vec![BTreeMap::new()];
    for name in names {
        let values = candidates(t, &name)?;
        out = out
            .into_iter()
            .flat_map(|s| {
                let name = name.clone();
                values.iter().map(move |v| {
                    let mut s = s.clone();
                    s.insert(name.clone(), v.clone());
                    s
                })
            })
            .collect();
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Template navigation

fn resources(t: &Value) -> impl Iterator<Item = (&String, &Value)> {
    t["Resources"].as_object().into_iter().flatten()
}

fn resources_of<'a>(t: &'a Value, kind: &'a str) -> impl Iterator<Item = (&'a String, &'a Value)> {
    resources(t).filter(move |(_, r)| r["Type"] == kind)
}

/// The logical id a `!GetAtt X.Arn` or `!Ref X` points at.
fn target(expr: &Value) -> Option<&str> {
    expr.get("Ref").and_then(Value::as_str).or_else(|| {
        expr.get("Fn::GetAtt")
            .and_then(|a| a.get(0))
            .and_then(Value::as_str)
    })
}

/// (function id, function, event) for every SQS event of every SAM function.
fn sqs_events(t: &Value) -> Vec<(&String, &Value, &Value)> {
    resources_of(t, "AWS::Serverless::Function")
        .flat_map(|(id, f)| {
            f["Properties"]["Events"]
                .as_object()
                .into_iter()
                .flatten()
                .filter(|(_, e)| e["Type"] == "SQS")
                .map(move |(_, e)| (id, f, e))
        })
        .collect()
}

fn function_timeout(t: &Value, f: &Value) -> Value {
    f["Properties"]
        .get("Timeout")
        .or_else(|| t["Globals"]["Function"].get("Timeout"))
        .cloned()
        .unwrap_or(json!(SAM_DEFAULT_TIMEOUT))
}

fn queue<'a>(t: &'a Value, event: &Value) -> Result<(&'a str, &'a Value), String> {
    let id = target(&event["Properties"]["Queue"]).ok_or("SQS event without a queue reference")?;
    let (id, q) = resources(t)
        .find(|(k, _)| k.as_str() == id)
        .ok_or_else(|| format!("queue {id} is not a resource of the template"))?;
    Ok((id.as_str(), q))
}

// ---------------------------------------------------------------------------------------------
// The checks. Each returns the problems it found (empty = the rule holds).

fn check_visibility_timeout(t: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    for (fid, f, event) in sqs_events(t) {
        let (qid, q) = match queue(t, event) {
            Ok(x) => x,
            Err(e) => {
                problems.push(format!("{fid}: {e}"));
                continue;
            }
        };
        let timeout = function_timeout(t, f);
        let visibility = q["Properties"]
            .get("VisibilityTimeout")
            .cloned()
            .unwrap_or(json!(SQS_DEFAULT_VISIBILITY));
        let all = match scenarios(t, &[&timeout, &visibility]) {
            Ok(s) => s,
            Err(e) => {
                problems.push(format!("{qid} visibility vs {fid} timeout: {e}"));
                continue;
            }
        };
        for s in all {
            match (eval_number(t, &timeout, &s), eval_number(t, &visibility, &s)) {
                (Ok(to), Ok(vis)) if vis >= VISIBILITY_FACTOR * to => {}
                (Ok(to), Ok(vis)) => problems.push(format!(
                    "{qid} VisibilityTimeout {vis} s is less than {VISIBILITY_FACTOR} x {fid} Timeout \
                     {to} s (parameters {s:?})"
                )),
                (Err(e), _) | (_, Err(e)) => problems.push(format!("{qid}/{fid} with {s:?}: {e}")),
            }
        }
    }
    problems
}

fn check_partial_batch_response(t: &Value) -> Vec<String> {
    let events = sqs_events(t);
    if events.is_empty() {
        return vec!["no function has an SQS event source".into()];
    }
    events
        .into_iter()
        .filter(|(_, _, e)| {
            !e["Properties"]["FunctionResponseTypes"]
                .as_array()
                .is_some_and(|a| a.iter().any(|v| v == "ReportBatchItemFailures"))
        })
        .map(|(fid, _, _)| {
            format!("{fid}: SQS event without FunctionResponseTypes: [ReportBatchItemFailures]")
        })
        .collect()
}

fn check_redrive(t: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    for (fid, _, event) in sqs_events(t) {
        let Ok((qid, q)) = queue(t, event) else {
            problems.push(format!("{fid}: no queue"));
            continue;
        };
        let redrive = &q["Properties"]["RedrivePolicy"];
        let Some(dlq_id) = target(&redrive["deadLetterTargetArn"]) else {
            problems.push(format!(
                "{qid}: no RedrivePolicy with a deadLetterTargetArn"
            ));
            continue;
        };
        let count = &redrive["maxReceiveCount"];
        match scenarios(t, &[count]) {
            Err(e) => problems.push(format!("{qid} maxReceiveCount: {e}")),
            Ok(all) => {
                for s in all {
                    match eval_number(t, count, &s) {
                        Ok(n) if n >= MIN_MAX_RECEIVE_COUNT => {}
                        Ok(n) => problems.push(format!(
                            "{qid} maxReceiveCount {n} < {MIN_MAX_RECEIVE_COUNT} ({s:?}): a throttled \
                             or briefly held message would reach the DLQ"
                        )),
                        Err(e) => problems.push(format!("{qid} maxReceiveCount: {e}")),
                    }
                }
            }
        }
        let dlq = &t["Resources"][dlq_id]["Properties"];
        let retention = |p: &Value| {
            p["MessageRetentionPeriod"]
                .as_i64()
                .unwrap_or(4 * 24 * 3600)
        };
        if retention(dlq) != DLQ_RETENTION_SECS {
            problems.push(format!(
                "{dlq_id} MessageRetentionPeriod {} != 14 days ({DLQ_RETENTION_SECS} s)",
                retention(dlq)
            ));
        }
        if retention(dlq) <= retention(&q["Properties"]) {
            problems.push(format!(
                "{dlq_id} must retain longer than {qid}: a message keeps its enqueue time when moved"
            ));
        }
    }
    problems
}

/// The claims table is the one `SQS_CLAIM_TABLE` names; its key and TTL attribute must be the
/// ones the DynamoDB store writes.
fn check_claims_table(t: &Value, key_attribute: &str, ttl_attribute: &str) -> Vec<String> {
    let mut problems = Vec::new();
    for (fid, f, _) in sqs_events(t) {
        let env = &f["Properties"]["Environment"]["Variables"];
        let Some(tid) = target(&env["SQS_CLAIM_TABLE"]) else {
            problems.push(format!("{fid}: SQS_CLAIM_TABLE is not a !Ref to a table"));
            continue;
        };
        let table = &t["Resources"][tid];
        if table["Type"] != "AWS::DynamoDB::Table" {
            problems.push(format!(
                "{fid}: SQS_CLAIM_TABLE refers to {tid}, not a DynamoDB table"
            ));
            continue;
        }
        let p = &table["Properties"];
        if p["BillingMode"] != "PAY_PER_REQUEST" {
            problems.push(format!("{tid}: BillingMode is not PAY_PER_REQUEST"));
        }
        let ttl = &p["TimeToLiveSpecification"];
        if ttl["AttributeName"] != ttl_attribute || ttl["Enabled"] != true {
            problems.push(format!(
                "{tid}: TTL must be enabled on {ttl_attribute:?}, the attribute the store writes \
                 (found {ttl})"
            ));
        }
        let hash = p["KeySchema"]
            .as_array()
            .and_then(|k| k.iter().find(|k| k["KeyType"] == "HASH"))
            .map(|k| k["AttributeName"].clone());
        if hash != Some(json!(key_attribute)) {
            problems.push(format!(
                "{tid}: partition key must be {key_attribute:?} (found {hash:?})"
            ));
        }
        let key_type = p["AttributeDefinitions"]
            .as_array()
            .and_then(|a| a.iter().find(|d| d["AttributeName"] == key_attribute))
            .map(|d| d["AttributeType"].clone());
        if key_type != Some(json!("S")) {
            problems.push(format!(
                "{tid}: {key_attribute:?} must be a string (S) attribute"
            ));
        }
    }
    problems
}

/// Every IAM statement in the template, with where it was found. `Fn::If` branches count.
fn statements(t: &Value) -> Vec<(String, Value)> {
    fn collect(where_: &str, doc: &Value, out: &mut Vec<(String, Value)>) {
        match doc {
            Value::Object(m) if m.contains_key("Fn::If") => {
                if let Some(a) = m["Fn::If"].as_array() {
                    a.iter().skip(1).for_each(|b| collect(where_, b, out));
                }
            }
            Value::Object(m) if m.contains_key("Statement") => match &m["Statement"] {
                Value::Array(s) => s.iter().for_each(|s| collect(where_, s, out)),
                s => collect(where_, s, out),
            },
            Value::Object(m) if m.contains_key("PolicyDocument") => {
                collect(where_, &m["PolicyDocument"], out)
            }
            Value::Object(m) if m.contains_key("Action") || m.contains_key("NotAction") => {
                out.push((where_.to_owned(), doc.clone()));
            }
            Value::Array(a) => a.iter().for_each(|d| collect(where_, d, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    for (id, r) in resources(t) {
        let p = &r["Properties"];
        match r["Type"].as_str() {
            Some("AWS::IAM::Role") => collect(id, &p["Policies"], &mut out),
            Some("AWS::IAM::Policy" | "AWS::IAM::ManagedPolicy") => {
                collect(id, &p["PolicyDocument"], &mut out)
            }
            Some("AWS::Serverless::Function") => collect(id, &p["Policies"], &mut out),
            _ => {}
        }
    }
    out
}

fn list(v: &Value) -> Vec<Value> {
    match v {
        Value::Array(a) => a.clone(),
        Value::Null => Vec::new(),
        other => vec![other.clone()],
    }
}

fn check_iam(t: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let kind_of = |id: &str| t["Resources"][id]["Type"].as_str().unwrap_or("").to_owned();
    for (where_, s) in statements(t) {
        if s["Effect"] != "Allow" {
            continue;
        }
        if s.get("NotAction").is_some() || s.get("NotResource").is_some() {
            problems.push(format!("{where_}: NotAction/NotResource grants too much"));
        }
        let actions: Vec<String> = list(&s["Action"])
            .iter()
            .filter_map(|a| a.as_str().map(str::to_lowercase))
            .collect();
        let resources = list(&s["Resource"]);
        let data_plane = actions
            .iter()
            .any(|a| a == "*" || a.starts_with("dynamodb:") || a.starts_with("sqs:"));
        if !data_plane {
            continue;
        }
        for a in &actions {
            if a.contains('*') {
                problems.push(format!("{where_}: wildcard action {a:?}"));
            }
        }
        for r in &resources {
            if r.as_str().is_some_and(|r| r.contains('*')) {
                problems.push(format!("{where_}: {actions:?} on {r}: every DynamoDB/SQS statement must name its resource"));
                continue;
            }
            let Some(id) = target(r) else {
                problems.push(format!(
                    "{where_}: {actions:?} on {r}: not a resource of this template"
                ));
                continue;
            };
            let kind = kind_of(id);
            let fifo = t["Resources"][id]["Properties"]["FifoQueue"] == true;
            let failure_queue = failure_queues(t).contains(&id);
            for a in &actions {
                let ok = match a.as_str() {
                    a if a.starts_with("dynamodb:") => kind == "AWS::DynamoDB::Table",
                    // The consumer publishes to the FIFO output queue ...
                    // ... and to the failure queue (SQS_CLAIM_FAILURE_QUEUE_URL).
                    "sqs:sendmessage" => kind == "AWS::SQS::Queue" && (fifo || failure_queue),
                    a if a.starts_with("sqs:") => {
                        kind == "AWS::SQS::Queue"
                            && sqs_events(t)
                                .iter()
                                .any(|(_, _, e)| target(&e["Properties"]["Queue"]) == Some(id))
                    }
                    _ => true,
                };
                if !ok {
                    problems.push(format!("{where_}: {a} on {id} ({kind}) is not needed"));
                }
            }
        }
    }
    // SAM gives a function without a Role its own, and attaches AWSLambdaSQSQueueExecutionRole
    // for an SQS event: receive/delete on every queue.
    for (fid, f, _) in sqs_events(t) {
        if f["Properties"].get("Role").is_none() {
            problems.push(format!(
                "{fid}: no explicit Role, so SAM attaches AWSLambdaSQSQueueExecutionRole \
                 (sqs:ReceiveMessage/DeleteMessage on Resource \"*\")"
            ));
        }
    }
    for (id, r) in resources(t) {
        for arn in list(&r["Properties"]["ManagedPolicyArns"]) {
            if arn.as_str().is_some_and(|a| a.contains("FullAccess")) {
                problems.push(format!("{id}: managed policy {arn}"));
            }
        }
    }
    problems
}

/// The function is built by cargo-lambda from the `consumer` binary, for the `Architecture`
/// parameter's instruction set (Graviton by default), and gets its
/// resources through the environment variables the reference consumer reads.
fn check_function_wiring(t: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    for (fid, f, _) in sqs_events(t) {
        let p = &f["Properties"];
        let expect = [
            (&f["Metadata"]["BuildMethod"], json!("rust-cargolambda")),
            (
                &f["Metadata"]["BuildProperties"]["Binary"],
                json!("consumer"),
            ),
            (&p["Runtime"], json!("provided.al2023")),
            (&p["Handler"], json!("bootstrap")),
            (&p["Architectures"], json!([{"Ref": "Architecture"}])),
            // Graviton unless the team says otherwise: 20% cheaper per GB-second.
            (&t["Parameters"]["Architecture"]["Default"], json!("arm64")),
            (
                &t["Parameters"]["Architecture"]["AllowedValues"],
                json!(["arm64", "x86_64"]),
            ),
            (&p["CodeUri"], json!(".")),
        ];
        for (got, want) in expect {
            if *got != want {
                problems.push(format!("{fid}: expected {want}, found {got}"));
            }
        }
        let env = &p["Environment"]["Variables"];
        let table_of = |var: &str| target(&env[var]).map(|id| t["Resources"][id]["Type"].clone());
        for var in ["SQS_CLAIM_TABLE", "SQS_CLAIM_ACCOUNTS_TABLE"] {
            if table_of(var) != Some(json!("AWS::DynamoDB::Table")) {
                problems.push(format!("{fid}: {var} must be a !Ref to a DynamoDB table"));
            }
        }
        if target(&env["SQS_CLAIM_TABLE"]) == target(&env["SQS_CLAIM_ACCOUNTS_TABLE"]) {
            problems.push(format!("{fid}: claims and accounts must be two tables"));
        }
        let store = env["SQS_CLAIM_STORE"]["Fn::Sub"].as_str().unwrap_or("");
        let claims = target(&env["SQS_CLAIM_TABLE"]).unwrap_or("?");
        if store != format!("dynamodb:${{{claims}}}") {
            problems.push(format!(
                "{fid}: SQS_CLAIM_STORE must be dynamodb:${{{claims}}}, found {store:?}"
            ));
        }
        // The output queue exists only under its condition; the variable must follow it.
        let out = &env["SQS_CLAIM_OUTPUT_QUEUE_URL"]["Fn::If"];
        let queue_id = target(&out[1]);
        let condition = queue_id.map(|q| t["Resources"][q]["Condition"].clone());
        if out[0].as_str().is_none()
            || condition != Some(out[0].clone())
            || out[2] != json!({"Ref": "AWS::NoValue"})
        {
            problems.push(format!(
                "{fid}: SQS_CLAIM_OUTPUT_QUEUE_URL must be !If [cond, !Ref OutputQueue, !Ref AWS::NoValue] \
                 with the queue's own condition"
            ));
        }
        if queue_id.is_some_and(|q| t["Resources"][q]["Properties"]["FifoQueue"] != true) {
            problems.push(format!("{fid}: the output queue must be FIFO"));
        }
        let ev = sqs_events(t);
        for key in ["BatchSize", "MaximumBatchingWindowInSeconds"] {
            if ev
                .iter()
                .any(|(_, _, e)| e["Properties"][key].get("Ref").is_none())
            {
                problems.push(format!("{fid}: the SQS event's {key} must be a parameter"));
            }
        }
        if ev.iter().any(|(_, _, e)| {
            e["Properties"]["ScalingConfig"]["MaximumConcurrency"]
                .get("Ref")
                .is_none()
        }) {
            problems.push(format!(
                "{fid}: ScalingConfig.MaximumConcurrency must be a parameter"
            ));
        }
    }
    problems
}

/// The queues a function names as its failure queue (`SQS_CLAIM_FAILURE_QUEUE_URL`).
fn failure_queues(t: &Value) -> Vec<&str> {
    sqs_events(t)
        .iter()
        .filter_map(|(_, f, _)| {
            target(&f["Properties"]["Environment"]["Variables"]["SQS_CLAIM_FAILURE_QUEUE_URL"])
        })
        .collect()
}

/// Whether a statement of the template allows `action` on queue `id`.
fn allows(t: &Value, action: &str, id: &str) -> bool {
    statements(t).iter().any(|(_, s)| {
        s["Effect"] == "Allow"
            && list(&s["Action"])
                .iter()
                .any(|a| a.as_str().is_some_and(|a| a.eq_ignore_ascii_case(action)))
            && list(&s["Resource"]).iter().any(|r| target(r) == Some(id))
    })
}

/// With `SQS_CLAIM_BACKOFF=on`: the role may change visibilities on the input queue (whose URL
/// the function gets), the backoff fits SQS's 12 h and the queue's retention, and the default
/// maxReceiveCount lets it reach its cap (as `sqs-claim doctor`'s backoff rules ask). With a
/// failure queue: the role may send to it, and it is the DLQ with the same receive count.
fn check_retries(t: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let default = |p: &str| t["Parameters"][p]["Default"].as_i64();
    for (fid, f, event) in sqs_events(t) {
        let Ok((qid, q)) = queue(t, event) else {
            continue;
        };
        let env = &f["Properties"]["Environment"]["Variables"];
        if env["SQS_CLAIM_BACKOFF"] == "on" {
            if !allows(t, "sqs:ChangeMessageVisibility", qid) {
                problems.push(format!(
                    "{fid}: SQS_CLAIM_BACKOFF is on but no statement allows \
                     sqs:ChangeMessageVisibility on {qid}"
                ));
            }
            if target(&env["SQS_CLAIM_SOURCE_QUEUE_URL"]) != Some(qid) {
                problems.push(format!(
                    "{fid}: SQS_CLAIM_SOURCE_QUEUE_URL must be !Ref {qid} (else the function \
                     needs sqs:GetQueueUrl)"
                ));
            }
            let secs = |var: &str, fallback: u64| {
                target(&env[var])
                    .and_then(default)
                    .map_or(fallback, |v| u64::try_from(v).unwrap_or(0))
            };
            let backoff = sqs_claim::Backoff::exponential(
                std::time::Duration::from_secs(secs("SQS_CLAIM_BACKOFF_FIRST_SECS", 30)),
                std::time::Duration::from_secs(secs("SQS_CLAIM_BACKOFF_CAP_SECS", 900)),
            );
            let retention = q["Properties"]["MessageRetentionPeriod"]
                .as_i64()
                .unwrap_or(345_600);
            if i64::try_from(backoff.cap().as_secs()).unwrap_or(i64::MAX) >= retention {
                problems.push(format!(
                    "{fid}: backoff cap {} s >= {qid}'s retention {retention} s",
                    backoff.cap().as_secs()
                ));
            }
            let count_expr = &q["Properties"]["RedrivePolicy"]["maxReceiveCount"];
            let count = target(count_expr).and_then(default).unwrap_or(0);
            let need = backoff.receives_to_cap().map_or(0, |n| i64::from(n) + 1);
            if count < need {
                problems.push(format!(
                    "{fid}: default maxReceiveCount {count} < {need}: the receives run out before \
                     the backoff reaches its cap"
                ));
            }
        }
        if let Some(failures) = target(&env["SQS_CLAIM_FAILURE_QUEUE_URL"]) {
            if !allows(t, "sqs:SendMessage", failures) {
                problems.push(format!(
                    "{fid}: no statement allows sqs:SendMessage on {failures}"
                ));
            }
            let redrive = &q["Properties"]["RedrivePolicy"];
            if target(&redrive["deadLetterTargetArn"]) != Some(failures) {
                problems.push(format!(
                    "{fid}: the failure queue {failures} is not {qid}'s DLQ"
                ));
            }
            if env["SQS_CLAIM_MAX_RECEIVES"] != redrive["maxReceiveCount"] {
                problems.push(format!(
                    "{fid}: SQS_CLAIM_MAX_RECEIVES must be {qid}'s maxReceiveCount"
                ));
            }
        }
    }
    problems
}

/// For the default MaxReceiveCount and TTL, and every allowed timeout: a completed key is
/// remembered longer than SQS can keep redelivering the message.
fn check_ttl_covers_redelivery(t: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    for (fid, f, event) in sqs_events(t) {
        let Ok((qid, q)) = queue(t, event) else {
            continue;
        };
        let env = &f["Properties"]["Environment"]["Variables"];
        let Some(ttl_param) = target(&env["SQS_CLAIM_TTL_SECS"]) else {
            problems.push(format!("{fid}: SQS_CLAIM_TTL_SECS must be a parameter"));
            continue;
        };
        let default = |p: &str| t["Parameters"][p]["Default"].clone();
        let ttl = default(ttl_param).as_i64().unwrap_or(0);
        let count_expr = &q["Properties"]["RedrivePolicy"]["maxReceiveCount"];
        let count = target(count_expr)
            .map(default)
            .unwrap_or(count_expr.clone())
            .as_i64()
            .unwrap_or(0);
        let visibility = q["Properties"]["VisibilityTimeout"].clone();
        let Ok(all) = scenarios(t, &[&visibility]) else {
            continue;
        };
        for s in all {
            if let Ok(vis) = eval_number(t, &visibility, &s)
                && ttl < vis * count
            {
                problems.push(format!(
                    "{qid}: TTL {ttl} s < visibility {vis} s x maxReceiveCount {count} ({s:?})"
                ));
            }
        }
    }
    problems
}

/// Lambda's levels that would drop the EMF metrics lines: Lambda reads a JSON line without a
/// `level` as INFO, and filters it out above INFO.
const LEVELS_ABOVE_INFO: &[&str] = &["WARN", "ERROR", "FATAL"];

/// Logs are JSON (what the consumer writes, and what Lambda's level filtering needs), at an
/// application log level from a parameter that defaults to INFO and can never drop the metrics
/// lines; RUST_LOG is not forced under it.
fn check_logging(t: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    for (fid, f, _) in sqs_events(t) {
        let lc = &f["Properties"]["LoggingConfig"];
        if lc["LogFormat"] != "JSON" {
            problems.push(format!(
                "{fid}: LoggingConfig.LogFormat must be JSON, found {}",
                lc["LogFormat"]
            ));
        }
        if target(&lc["LogGroup"]).is_none() {
            problems.push(format!(
                "{fid}: LoggingConfig.LogGroup must name the log group"
            ));
        }
        let level = &lc["ApplicationLogLevel"];
        match level.get("Ref").and_then(Value::as_str) {
            None => problems.push(format!(
                "{fid}: LoggingConfig.ApplicationLogLevel must be a parameter, found {level}"
            )),
            Some(param) => {
                let p = &t["Parameters"][param];
                if p["Default"] != "INFO" {
                    problems.push(format!(
                        "{param}: the default must be INFO, found {}",
                        p["Default"]
                    ));
                }
                match p["AllowedValues"].as_array() {
                    None => problems.push(format!(
                        "{param}: needs AllowedValues, or WARN/ERROR would drop the metrics lines"
                    )),
                    Some(allowed) => {
                        for v in allowed {
                            if LEVELS_ABOVE_INFO.contains(&v.as_str().unwrap_or("")) {
                                problems.push(format!(
                                    "{param}: {v} would drop the EMF metrics lines (no level: INFO)"
                                ));
                            }
                        }
                    }
                }
            }
        }
        let rust_log = &f["Properties"]["Environment"]["Variables"]["RUST_LOG"];
        if rust_log.is_string() {
            problems.push(format!(
                "{fid}: RUST_LOG is fixed to {rust_log}: leave it to a parameter, or unset"
            ));
        }
        let ns = &f["Properties"]["Environment"]["Variables"]["SQS_CLAIM_METRICS_NAMESPACE"];
        let default_ns = target(ns).map(|p| t["Parameters"][p]["Default"].clone());
        if default_ns
            .as_ref()
            .and_then(Value::as_str)
            .is_none_or(|n| n == "off")
        {
            problems.push(format!(
                "{fid}: SQS_CLAIM_METRICS_NAMESPACE must be a parameter whose default is not off"
            ));
        }
    }
    problems
}

/// The alarms an on-call engineer needs: the queue's oldest message (SQS's own metric), and
/// the consumer's Failed metric in the namespace the function writes, with exactly the
/// dimensions it writes (`FunctionName`, `QueueName`); an alarm on other dimensions would
/// watch a metric that never exists.
fn check_alarms(t: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let alarms: Vec<(&String, &Value)> = resources_of(t, "AWS::CloudWatch::Alarm").collect();
    let dims = |a: &Value| -> BTreeMap<String, Value> {
        a["Properties"]["Dimensions"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|d| {
                (
                    d["Name"].as_str().unwrap_or("").to_owned(),
                    d["Value"].clone(),
                )
            })
            .collect()
    };
    for (fid, f, event) in sqs_events(t) {
        let Ok((qid, _)) = queue(t, event) else {
            continue;
        };
        let queue_name = json!({"Fn::GetAtt": [qid, "QueueName"]});
        let oldest = alarms.iter().any(|(_, a)| {
            a["Properties"]["Namespace"] == "AWS/SQS"
                && a["Properties"]["MetricName"] == "ApproximateAgeOfOldestMessage"
                && dims(a).get("QueueName") == Some(&queue_name)
        });
        if !oldest {
            problems.push(format!(
                "{qid}: no alarm on AWS/SQS ApproximateAgeOfOldestMessage for the input queue"
            ));
        }
        let ns = &f["Properties"]["Environment"]["Variables"]["SQS_CLAIM_METRICS_NAMESPACE"];
        let want = BTreeMap::from([
            ("FunctionName".to_owned(), json!({"Ref": fid})),
            ("QueueName".to_owned(), queue_name.clone()),
        ]);
        let failed: Vec<&(&String, &Value)> = alarms
            .iter()
            .filter(|(_, a)| a["Properties"]["MetricName"] == "Failed")
            .collect();
        if failed.is_empty() {
            problems.push(format!("{fid}: no alarm on the consumer's Failed metric"));
        }
        for (aid, a) in failed {
            if a["Properties"]["Namespace"] != *ns {
                problems.push(format!(
                    "{aid}: its namespace {} is not the function's SQS_CLAIM_METRICS_NAMESPACE {ns}",
                    a["Properties"]["Namespace"]
                ));
            }
            if dims(a) != want {
                problems.push(format!(
                    "{aid}: its dimensions {:?} are not the ones the consumer writes {want:?}",
                    dims(a)
                ));
            }
            if a["Properties"]["Statistic"] != "Sum" {
                problems.push(format!("{aid}: Failed is a count per batch: use Sum"));
            }
        }
    }
    problems
}

type Check = fn(&Value) -> Vec<String>;

fn store_attributes() -> (String, String) {
    let a = sqs_claim::store::dynamodb::DynamoDbAttributes::default();
    (a.key.clone(), a.expiration.clone())
}

fn check_claims(t: &Value) -> Vec<String> {
    let (key, ttl) = store_attributes();
    check_claims_table(t, &key, &ttl)
}

const CHECKS: &[(&str, Check)] = &[
    (
        "visibility timeout >= 6x function timeout",
        check_visibility_timeout,
    ),
    ("ReportBatchItemFailures", check_partial_batch_response),
    ("redrive to a DLQ", check_redrive),
    ("claims table key and TTL", check_claims),
    ("least-privilege IAM", check_iam),
    ("function wiring", check_function_wiring),
    ("TTL covers redelivery", check_ttl_covers_redelivery),
    ("JSON logs at a level that keeps the metrics", check_logging),
    ("alarms", check_alarms),
    ("retries", check_retries),
    ("sizes and envelope", check_sizes_and_envelope),
];

/// SQS's largest message, 1 MiB (since 2025-08-04; the Lambda SQS event source since
/// 2026-01-29).
const SQS_MAX_MESSAGE_BYTES: i64 = 1_048_576;

/// Large messages and envelopes: every queue takes 1 MiB (the DLQ as much as the queue it
/// backs), notices go to S3 only over what the output queue takes, pointers are read from the
/// template's bucket alone; the envelope is a parameter, and `envelope-id` is refused without
/// an envelope that has an id.
fn check_sizes_and_envelope(t: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    for (id, q) in resources_of(t, "AWS::SQS::Queue") {
        if q["Properties"]["MaximumMessageSize"].as_i64() != Some(SQS_MAX_MESSAGE_BYTES) {
            problems.push(format!(
                "{id}: MaximumMessageSize must be {SQS_MAX_MESSAGE_BYTES} (found {})",
                q["Properties"]["MaximumMessageSize"]
            ));
        }
    }
    for (fid, f, _) in sqs_events(t) {
        let env = &f["Properties"]["Environment"]["Variables"];
        match target(&env["SQS_CLAIM_ENVELOPE"]) {
            Some(param) => {
                let allowed = &t["Parameters"][param]["AllowedValues"];
                if *allowed != json!(["none", "sns", "eventbridge", "s3"]) {
                    problems.push(format!(
                        "{fid}: parameter {param} must allow none, sns, eventbridge, s3 (found {allowed})"
                    ));
                }
            }
            None => problems.push(format!(
                "{fid}: SQS_CLAIM_ENVELOPE must be a !Ref to a parameter"
            )),
        }
        let buckets = &env["SQS_CLAIM_LARGE_MESSAGE_BUCKETS"]["Fn::If"];
        let reads = &env["SQS_CLAIM_LARGE_MESSAGES"]["Fn::If"];
        if buckets[0] != reads[0] || buckets[1].get("Ref").is_none() {
            problems.push(format!(
                "{fid}: SQS_CLAIM_LARGE_MESSAGE_BUCKETS must be !If [<the condition of \
                 SQS_CLAIM_LARGE_MESSAGES>, !Ref <bucket>, ...]: pointers read from the role's \
                 bucket alone"
            ));
        }
        let over = env["SQS_CLAIM_OFFLOAD_OVER_BYTES"]["Fn::If"][1]
            .as_str()
            .and_then(|v| v.parse::<i64>().ok());
        if over != Some(SQS_MAX_MESSAGE_BYTES) {
            problems.push(format!(
                "{fid}: SQS_CLAIM_OFFLOAD_OVER_BYTES must be {SQS_MAX_MESSAGE_BYTES} under the \
                 output queue's condition (found {over:?})"
            ));
        }
        let key = target(&env["SQS_CLAIM_KEY"]).unwrap_or("");
        let pattern = t["Parameters"][key]["AllowedPattern"]
            .as_str()
            .unwrap_or("");
        if pattern.contains("envelope-id") {
            let guarded = t["Rules"].as_object().is_some_and(|rules| {
                rules.values().any(|r| {
                    r["RuleCondition"] == json!({"Fn::Equals": [{"Ref": key}, "envelope-id"]})
                        && r["Assertions"].as_array().is_some_and(|a| {
                            a.iter().any(|a| {
                                a["Assert"]
                                    == json!({"Fn::Contains": [["sns", "eventbridge"], {"Ref": target(&env["SQS_CLAIM_ENVELOPE"]).unwrap_or("")}]})
                            })
                        })
                })
            });
            if !guarded {
                problems.push(format!(
                    "{fid}: {key} allows envelope-id, and no rule asserts the envelope is sns or \
                     eventbridge when it is chosen (the consumer would refuse to start)"
                ));
            }
        }
    }
    problems
}

fn all_problems(text: &str) -> Vec<String> {
    let t = match parse(text) {
        Ok(t) => t,
        Err(e) => return vec![e],
    };
    CHECKS
        .iter()
        .flat_map(|(name, check)| check(&t).into_iter().map(move |p| format!("[{name}] {p}")))
        .collect()
}

/// Replaces exactly one occurrence of `from` (so a mutation cannot silently miss).
fn mutate(text: &str, from: &str, to: &str) -> String {
    assert_eq!(
        text.matches(from).count(),
        1,
        "mutation anchor {from:?} must occur exactly once"
    );
    text.replacen(from, to, 1)
}

// ---------------------------------------------------------------------------------------------
// Tests

#[test]
fn the_template_keeps_every_rule() {
    let problems = all_problems(&template_text());
    assert!(
        problems.is_empty(),
        "template.yaml breaks rules:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_template_has_the_resources_and_outputs_the_readme_promises() {
    let t = parse(&template_text()).expect("parses");
    let kinds: Vec<&str> = resources(&t)
        .filter_map(|(_, r)| r["Type"].as_str())
        .collect();
    for kind in [
        "AWS::Serverless::Function",
        "AWS::SQS::Queue",
        "AWS::DynamoDB::Table",
        "AWS::IAM::Role",
    ] {
        assert!(kinds.contains(&kind), "no {kind}");
    }
    assert_eq!(
        kinds
            .iter()
            .filter(|k| **k == "AWS::DynamoDB::Table")
            .count(),
        2,
        "claims + accounts"
    );
    let accounts = resources_of(&t, "AWS::DynamoDB::Table")
        .find(|(_, r)| r["Properties"]["KeySchema"][0]["AttributeName"] == "account")
        .expect("an accounts table keyed by `account`");
    assert_eq!(accounts.1["Properties"]["BillingMode"], "PAY_PER_REQUEST");
    for output in [
        "InputQueueUrl",
        "InputQueueArn",
        "DeadLetterQueueUrl",
        "DeadLetterQueueArn",
        "ClaimsTableName",
        "AccountsTableName",
        "ConsumerFunctionName",
        "ConsumerFunctionArn",
        "OutputQueueUrl",
    ] {
        assert!(
            t["Outputs"].get(output).is_some(),
            "output {output} missing"
        );
    }
}

#[test]
fn cargo_release_profile_keeps_panic_unwind() {
    // cargo-lambda builds release binaries with panic = "abort" unless the profile says
    // otherwise; the processor catches a handler's panic per message only with unwinding.
    // Profiles live in the workspace root's manifest; the binary in the app's.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.toml");
    let root = std::fs::read_to_string(root).expect("the workspace's Cargo.toml");
    let cargo = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
        .expect("the app's Cargo.toml");
    let release = root
        .split("\n[")
        .find(|s| s.starts_with("profile.release]"))
        .expect("a [profile.release] section");
    assert!(
        release.lines().any(|l| l.trim() == "panic = \"unwind\""),
        "[profile.release] must set panic = \"unwind\""
    );
    assert!(
        cargo.contains("name = \"consumer\""),
        "the template builds the `consumer` binary"
    );
}

/// Each mutation breaks one rule; the named check must report it. This is what proves the
/// checks above can fail.
#[test]
fn every_check_rejects_a_template_that_breaks_its_rule() {
    let text = template_text();
    let cases: &[(&str, &str, &str, &str)] = &[
        // Visibility: 5x instead of 6x for the default timeout.
        (
            "visibility",
            "\"30\":\n      VisibilityTimeout: 180",
            "\"30\":\n      VisibilityTimeout: 150",
            "less than 6 x",
        ),
        // Visibility as a literal that is too short for some allowed timeouts.
        (
            "visibility",
            "VisibilityTimeout: !FindInMap [VisibilityByTimeout, !Ref FunctionTimeout, VisibilityTimeout]",
            "VisibilityTimeout: 900",
            "less than 6 x",
        ),
        // A timeout allowed without a mapping entry.
        (
            "visibility",
            "AllowedValues: [10, 15, 30, 60, 120, 300, 600, 900]",
            "AllowedValues: [10, 15, 30, 45, 60, 120, 300, 600, 900]",
            "no entry 45",
        ),
        // A free timeout parameter cannot be proven.
        (
            "visibility",
            "AllowedValues: [10, 15, 30, 60, 120, 300, 600, 900]",
            "MinValue: 1",
            "no entry",
        ),
        // No partial batch response.
        (
            "ReportBatchItemFailures",
            "            FunctionResponseTypes:\n              - ReportBatchItemFailures\n",
            "",
            "ReportBatchItemFailures",
        ),
        // Redrive too eager, as a parameter bound and as a literal.
        (
            "redrive",
            "MinValue: 5\n    MaxValue: 100",
            "MinValue: 2\n    MaxValue: 100",
            "maxReceiveCount 2 < 5",
        ),
        (
            "redrive",
            "maxReceiveCount: !Ref MaxReceiveCount",
            "maxReceiveCount: 3",
            "maxReceiveCount 3 < 5",
        ),
        (
            "redrive",
            "        maxReceiveCount: !Ref MaxReceiveCount\n",
            "",
            "maxReceiveCount",
        ),
        (
            "redrive",
            "MessageRetentionPeriod: 1209600",
            "MessageRetentionPeriod: 345600",
            "14 days",
        ),
        // TTL on an attribute the store does not write.
        (
            "claims",
            "TimeToLiveSpecification:\n        AttributeName: expiration",
            "TimeToLiveSpecification:\n        AttributeName: ttl",
            "TTL must be enabled on \"expiration\"",
        ),
        (
            "claims",
            "        Enabled: true\n",
            "        Enabled: false\n",
            "TTL must be enabled",
        ),
        (
            "claims",
            "BillingMode: PAY_PER_REQUEST\n      AttributeDefinitions:\n        - AttributeName: id",
            "BillingMode: PROVISIONED\n      AttributeDefinitions:\n        - AttributeName: id",
            "PAY_PER_REQUEST",
        ),
        // IAM: a wildcard resource, a wildcard action, SendMessage on the input queue, and no
        // explicit role (SAM's managed policy).
        (
            "IAM",
            "Resource: !GetAtt ClaimsTable.Arn",
            "Resource: \"*\"",
            "must name its resource",
        ),
        (
            "IAM",
            "                  - dynamodb:DescribeTable\n                Resource: !GetAtt AccountsTable.Arn",
            "                  - dynamodb:*\n                Resource: !GetAtt AccountsTable.Arn",
            "wildcard action",
        ),
        (
            "IAM",
            "Resource: !GetAtt OutputQueue.Arn",
            "Resource: !GetAtt InputQueue.Arn",
            "sqs:sendmessage on InputQueue",
        ),
        (
            "IAM",
            "                  - sqs:GetQueueAttributes\n                Resource: !GetAtt InputQueue.Arn",
            "                  - sqs:GetQueueAttributes\n                Resource: !GetAtt DeadLetterQueue.Arn",
            "not needed",
        ),
        (
            "IAM",
            "      Role: !GetAtt ConsumerRole.Arn\n",
            "",
            "AWSLambdaSQSQueueExecutionRole",
        ),
        // Wiring: the wrong binary, x86, the store not on the claims table.
        (
            "wiring",
            "Binary: consumer",
            "Binary: sqs-claim",
            "\"consumer\"",
        ),
        (
            "wiring",
            "      Architectures:\n        - !Ref Architecture",
            "      Architectures:\n        - x86_64",
            "Architecture",
        ),
        (
            "wiring",
            "    Default: arm64\n    AllowedValues: [arm64, x86_64]",
            "    Default: x86_64\n    AllowedValues: [arm64, x86_64]",
            "arm64",
        ),
        (
            "wiring",
            "SQS_CLAIM_STORE: !Sub dynamodb:${ClaimsTable}",
            "SQS_CLAIM_STORE: !Sub dynamodb:${AccountsTable}",
            "SQS_CLAIM_STORE",
        ),
        (
            "wiring",
            "SQS_CLAIM_OUTPUT_QUEUE_URL: !If [CreateOutputQueue, !Ref OutputQueue, !Ref AWS::NoValue]",
            "SQS_CLAIM_OUTPUT_QUEUE_URL: !Ref OutputQueue",
            "SQS_CLAIM_OUTPUT_QUEUE_URL",
        ),
        (
            "wiring",
            "            BatchSize: !Ref BatchSize",
            "            BatchSize: 10",
            "BatchSize must be a parameter",
        ),
        // Logging: text format, a level that drops the metrics lines, a fixed level.
        (
            "logging",
            "        LogFormat: JSON\n",
            "        LogFormat: Text\n",
            "LogFormat must be JSON",
        ),
        (
            "logging",
            "AllowedValues: [TRACE, DEBUG, INFO]",
            "AllowedValues: [TRACE, DEBUG, INFO, WARN]",
            "would drop the EMF metrics lines",
        ),
        (
            "logging",
            "        ApplicationLogLevel: !Ref ApplicationLogLevel",
            "        ApplicationLogLevel: ERROR",
            "must be a parameter",
        ),
        (
            "logging",
            "RUST_LOG: !If [HasRustLog, !Ref LogLevel, !Ref AWS::NoValue]",
            "RUST_LOG: info",
            "RUST_LOG is fixed",
        ),
        (
            "logging",
            "    Default: sqs-claim\n",
            "    Default: \"off\"\n",
            "default is not off",
        ),
        // Alarms: the wrong SQS metric, the failed alarm on other dimensions or namespace.
        (
            "alarms",
            "MetricName: ApproximateAgeOfOldestMessage",
            "MetricName: ApproximateNumberOfMessagesVisible",
            "ApproximateAgeOfOldestMessage",
        ),
        (
            "alarms",
            "        - Name: QueueName\n          Value: !GetAtt InputQueue.QueueName\n      Statistic: Sum",
            "        - Name: QueueName\n          Value: !GetAtt DeadLetterQueue.QueueName\n      Statistic: Sum",
            "not the ones the consumer writes",
        ),
        (
            "alarms",
            "      Namespace: !Ref MetricsNamespace\n",
            "      Namespace: sqs-claim\n",
            "is not the function's SQS_CLAIM_METRICS_NAMESPACE",
        ),
        (
            "alarms",
            "      MetricName: Failed\n",
            "      MetricName: Errors\n",
            "no alarm on the consumer's Failed metric",
        ),
        (
            "retries",
            "                Action: sqs:ChangeMessageVisibility\n",
            "                Action: sqs:ChangeMessageVisibilityBatch\n",
            "no statement allows sqs:ChangeMessageVisibility",
        ),
        (
            "retries",
            "    Default: 8\n    MinValue: 5",
            "    Default: 5\n    MinValue: 5",
            "the receives run out before the backoff reaches its cap",
        ),
        (
            "retries",
            "MessageRetentionPeriod: 345600 # 4 days",
            "MessageRetentionPeriod: 600",
            "backoff cap 900 s >= InputQueue's retention 600 s",
        ),
        (
            "retries",
            "                Action: sqs:SendMessage\n                Resource: !GetAtt DeadLetterQueue.Arn",
            "                Action: sqs:SendMessage\n                Resource: !GetAtt InputQueue.Arn",
            "no statement allows sqs:SendMessage on DeadLetterQueue",
        ),
        // The dead-letter queue left at SQS's old default size.
        (
            "sizes",
            "MessageRetentionPeriod: 1209600\n      MaximumMessageSize: 1048576\n",
            "MessageRetentionPeriod: 1209600\n",
            "DeadLetterQueue: MaximumMessageSize must be",
        ),
        (
            "envelope",
            "          SQS_CLAIM_ENVELOPE: !Ref Envelope\n",
            "",
            "SQS_CLAIM_ENVELOPE must be a !Ref",
        ),
        (
            "envelope",
            "    RuleCondition: !Equals [!Ref KeySource, envelope-id]",
            "    RuleCondition: !Equals [!Ref KeySource, message-id]",
            "no rule asserts the envelope",
        ),
        (
            "buckets",
            "SQS_CLAIM_LARGE_MESSAGE_BUCKETS: !If [ReadsLargePayloads, !Ref LargePayloadBucket, !Ref AWS::NoValue]",
            "SQS_CLAIM_LARGE_MESSAGE_BUCKETS: !Ref AWS::NoValue",
            "SQS_CLAIM_LARGE_MESSAGE_BUCKETS must be",
        ),
        (
            "offload",
            "SQS_CLAIM_OFFLOAD_OVER_BYTES: !If [OffloadsNotices, \"1048576\", !Ref AWS::NoValue]",
            "SQS_CLAIM_OFFLOAD_OVER_BYTES: !If [OffloadsNotices, \"262144\", !Ref AWS::NoValue]",
            "SQS_CLAIM_OFFLOAD_OVER_BYTES must be",
        ),
        // TTL shorter than the redelivery window.
        (
            "ttl",
            "Default: 86400\n    MinValue: 3600",
            "Default: 3600\n    MinValue: 3600",
            "TTL 3600 s < visibility",
        ),
    ];
    let mut missed = Vec::new();
    for (rule, from, to, expect) in cases {
        let problems = all_problems(&mutate(&text, from, to));
        if !problems.iter().any(|p| p.contains(expect)) {
            missed.push(format!("{rule}: replacing {from:?} with {to:?} was not reported as {expect:?}; got {problems:#?}"));
        }
    }
    assert!(
        missed.is_empty(),
        "checks that did not fail:\n{}",
        missed.join("\n\n")
    );
}

#[test]
fn the_yaml_reader_keeps_cloudformation_short_tags() {
    let t = parse(
        "A: !Ref B\nC: !GetAtt D.Arn\nE: !Sub x-${F}\nG: !If [H, !Ref I, !Ref AWS::NoValue]\n",
    )
    .expect("parses");
    assert_eq!(t["A"], json!({"Ref": "B"}));
    assert_eq!(t["C"], json!({"Fn::GetAtt": ["D", "Arn"]}));
    assert_eq!(t["E"], json!({"Fn::Sub": "x-${F}"}));
    assert_eq!(
        t["G"],
        json!({"Fn::If": ["H", {"Ref": "I"}, {"Ref": "AWS::NoValue"}]})
    );
}

// ---------------------------------------------------------------------------------------------
// examples/streams/template.yaml: the stream consumers, deployable as written

fn streams_template_text() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../streams/template.yaml");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The `[[bin]]` names of the app's Cargo.toml.
fn app_binaries() -> Vec<String> {
    let cargo = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
        .expect("the app's Cargo.toml");
    let mut bins = Vec::new();
    let mut in_bin = false;
    for line in cargo.lines().map(str::trim) {
        if line.starts_with('[') {
            in_bin = line == "[[bin]]";
        } else if in_bin && let Some(name) = line.strip_prefix("name = ") {
            bins.push(name.trim_matches('"').to_owned());
        }
    }
    bins
}

/// What each stream function must have: built by cargo-lambda from the app's
/// `stream-consumer` binary at the workspace root, the settings `payments::stream` reads (and
/// no other), the tables' permissions (no more), and the DynamoDB mapping filtered to INSERTs.
fn streams_problems(text: &str) -> Vec<String> {
    let t = match parse(text) {
        Ok(t) => t,
        Err(e) => return vec![e],
    };
    let mut problems = Vec::new();
    let bins = app_binaries();
    let known: Vec<&str> = payments::stream::VARIABLES.iter().map(|v| v.name).collect();
    let source_of = |f: &Value, id: &str| -> Option<&'static str> {
        let events: Vec<&str> = f["Properties"]["Events"]
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(_, e)| e["Type"].as_str())
            .collect();
        match events.as_slice() {
            ["Kinesis"] => Some("kinesis"),
            ["DynamoDB"] => Some("dynamodb"),
            // The Kafka mapping is a resource of its own (AWS::Lambda::EventSourceMapping).
            [] if resources_of(&t, "AWS::Lambda::EventSourceMapping")
                .any(|(_, m)| target(&m["Properties"]["FunctionName"]) == Some(id)) =>
            {
                Some("kafka")
            }
            _ => None,
        }
    };
    let functions: Vec<_> = resources_of(&t, "AWS::Serverless::Function").collect();
    if functions.len() < 3 {
        problems.push(format!("{} stream functions, want 3", functions.len()));
    }
    let mut namespaces = Vec::new();
    for (id, f) in functions {
        let build = &f["Metadata"];
        if build["BuildMethod"] != "rust-cargolambda" {
            problems.push(format!("{id}: BuildMethod is not rust-cargolambda"));
        }
        match build["BuildProperties"]["Binary"].as_str() {
            Some(b) if b == "stream-consumer" && bins.iter().any(|x| x == b) => {}
            other => problems.push(format!(
                "{id}: Binary {other:?} is not the app's stream-consumer (binaries: {bins:?})"
            )),
        }
        // CodeUri is relative to the template: the workspace root, where cargo-lambda finds
        // every member's binaries.
        let code = f["Properties"]["CodeUri"].as_str().unwrap_or("");
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../streams")
            .join(code);
        let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap_or_default();
        if !manifest.contains("[workspace]") || !manifest.contains("examples/payments") {
            problems.push(format!(
                "{id}: CodeUri {code:?} is not the workspace holding examples/payments"
            ));
        }
        let env = &f["Properties"]["Environment"]["Variables"];
        let Some(vars) = env.as_object() else {
            problems.push(format!("{id}: no Environment"));
            continue;
        };
        for name in vars.keys() {
            if !known.contains(&name.as_str()) {
                problems.push(format!("{id}: {name} is not read by payments::stream"));
            }
        }
        let want = source_of(f, id);
        if want.is_none() || env["STREAM_SOURCE"].as_str() != want {
            problems.push(format!(
                "{id}: STREAM_SOURCE {} for its events' source {want:?}",
                env["STREAM_SOURCE"]
            ));
        }
        for (var, table) in [
            ("CLAIMS_TABLE", "ClaimsTable"),
            ("ACCOUNTS_TABLE", "AccountsTable"),
        ] {
            if target(&env[var]) != Some(table) || env[var].get("Ref").is_none() {
                problems.push(format!("{id}: {var} is not !Ref {table}"));
            }
        }
        if target(&env["CLAIM_TTL_SECS"]) != Some("IdempotencyTtlSeconds") {
            problems.push(format!(
                "{id}: CLAIM_TTL_SECS is not !Ref IdempotencyTtlSeconds"
            ));
        }
        match env["NAMESPACE"].as_str() {
            Some(ns) if !namespaces.contains(&ns) => namespaces.push(ns),
            other => problems.push(format!("{id}: NAMESPACE {other:?} is not its own")),
        }
        // Each function may do what a one-shot credit needs, on each table.
        let granted = |table: &str| -> Vec<String> {
            statements(&t)
                .into_iter()
                .filter(|(w, s)| w == id && s["Effect"] == "Allow")
                .filter(|(_, s)| {
                    list(&s["Resource"])
                        .iter()
                        .any(|r| target(r) == Some(table))
                })
                .flat_map(|(_, s)| list(&s["Action"]))
                .filter_map(|a| a.as_str().map(str::to_owned))
                .collect()
        };
        for (table, needs) in [
            (
                "ClaimsTable",
                &[
                    "dynamodb:PutItem",
                    "dynamodb:UpdateItem",
                    "dynamodb:DeleteItem",
                    "dynamodb:DescribeTable",
                ][..],
            ),
            (
                "AccountsTable",
                &["dynamodb:UpdateItem", "dynamodb:DescribeTable"][..],
            ),
        ] {
            let has = granted(table);
            for action in needs {
                if !has.iter().any(|a| a == action) {
                    problems.push(format!("{id}: no {action} on {table}"));
                }
            }
        }
        if want == Some("dynamodb") {
            let events = f["Properties"]["Events"].as_object().into_iter().flatten();
            for (name, e) in events {
                let patterns: Vec<Value> = list(&e["Properties"]["FilterCriteria"]["Filters"])
                    .iter()
                    .filter_map(|f| f["Pattern"].as_str())
                    .filter_map(|p| serde_json::from_str(p).ok())
                    .collect();
                if patterns != [json!({"eventName": ["INSERT"]})] {
                    problems.push(format!(
                        "{id}.{name}: the mapping is not filtered to INSERT records (the \
                         consumer credits only those; a MODIFY would fail and stop its shard)"
                    ));
                }
            }
        }
    }
    // IAM names its resources, as in template.yaml.
    problems.extend(check_iam(&t));
    let accounts = &t["Resources"]["AccountsTable"];
    if accounts["Type"] != "AWS::DynamoDB::Table"
        || accounts["Properties"]["KeySchema"][0]["AttributeName"] != "account"
    {
        problems.push("AccountsTable: not a DynamoDB table keyed by `account`".into());
    }
    let (key, ttl) = store_attributes();
    let claims = &t["Resources"]["ClaimsTable"]["Properties"];
    if claims["KeySchema"][0]["AttributeName"] != json!(key)
        || claims["TimeToLiveSpecification"]["AttributeName"] != json!(ttl)
        || claims["TimeToLiveSpecification"]["Enabled"] != true
    {
        problems.push(format!(
            "ClaimsTable: not keyed by {key:?} with TTL on {ttl:?}, as the store writes"
        ));
    }
    for output in [
        "ClaimsTableName",
        "AccountsTableName",
        "KinesisStreamName",
        "OrdersTableName",
        "KinesisConsumerName",
        "DynamoDbConsumerName",
        "StreamFailuresQueueUrl",
    ] {
        if t["Outputs"].get(output).is_none() {
            problems.push(format!("output {output} missing"));
        }
    }
    problems
}

#[test]
fn the_streams_template_builds_the_app_s_stream_consumer_and_wires_it() {
    let problems = streams_problems(&streams_template_text());
    assert!(
        problems.is_empty(),
        "examples/streams/template.yaml breaks rules:\n{}",
        problems.join("\n")
    );
}

#[test]
fn every_streams_check_rejects_a_template_that_breaks_its_rule() {
    let text = streams_template_text();
    for (from, to, want) in [
        (
            "Binary: stream-consumer",
            "Binary: streams-consumer",
            "is not the app's stream-consumer",
        ),
        ("CodeUri: ../..", "CodeUri: .", "is not the workspace"),
        (
            "STREAM_SOURCE: dynamodb",
            "STREAM_SOURCE: kinesis",
            "STREAM_SOURCE",
        ),
        (
            "ACCOUNTS_TABLE: !Ref AccountsTable",
            "ACCOUNTS_TABLE: !Ref ClaimsTable",
            "ACCOUNTS_TABLE is not !Ref AccountsTable",
        ),
        (
            "NAMESPACE: orders-kafka",
            "NAMESPACE: orders-kinesis",
            "is not its own",
        ),
        (
            "          NAMESPACE: orders-kinesis\n",
            "          NAMESPACE: orders-kinesis\n          CLAIMS_TABEL: x\n",
            "CLAIMS_TABEL is not read",
        ),
        (
            "'{\"eventName\": [\"INSERT\"]}'",
            "'{\"eventName\": [\"INSERT\", \"MODIFY\"]}'",
            "not filtered to INSERT",
        ),
        (
            "                - dynamodb:UpdateItem\n                - dynamodb:ConditionCheckItem\n                - dynamodb:DescribeTable\n              Resource: !GetAtt AccountsTable.Arn",
            "                - dynamodb:ConditionCheckItem\n                - dynamodb:DescribeTable\n              Resource: !GetAtt AccountsTable.Arn",
            "no dynamodb:UpdateItem on AccountsTable",
        ),
        (
            "Resource: !GetAtt AccountsTable.Arn",
            "Resource: \"*\"",
            "must name its resource",
        ),
        (
            "        AttributeName: expiration\n        Enabled: true",
            "        AttributeName: expires\n        Enabled: true",
            "ClaimsTable: not keyed",
        ),
        (
            "  AccountsTableName:\n",
            "  AccountsTableNames:\n",
            "output AccountsTableName missing",
        ),
    ] {
        assert!(text.contains(from), "the template has {from:?}");
        let problems = streams_problems(&text.replacen(from, to, 1));
        assert!(
            problems.iter().any(|p| p.contains(want)),
            "{from:?} -> {to:?} should be caught ({want}); problems: {problems:?}"
        );
    }
}
