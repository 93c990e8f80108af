//! Interop with Powertools for AWS Lambda (Python): its keys, its payload hash, its records.
//!
//! A team moving from Powertools' idempotency utility to sqs-claim on the same DynamoDB table
//! needs each side to see the other's records as duplicates, or the switch-over processes a
//! message twice. The record layout already matches ([`DynamoDbAttributes::default()`] is
//! Powertools' layout: `id`, `expiration` in epoch seconds, `in_progress_expiration` in epoch
//! milliseconds, `status` `INPROGRESS`/`COMPLETED`, `validation`); what differs is the key.
//! [`PowertoolsFormat`] derives it the way Powertools does:
//!
//! ```text
//! {AWS_LAMBDA_FUNCTION_NAME}.{module}.{qualname}#{md5(json.dumps(datum, sort_keys=True))}
//! ```
//!
//! where `datum` is what the `event_key_jmespath` selects (the whole event without one),
//! `{module}.{qualname}` names the decorated Python function (`app.lambda_handler`), and a
//! Powertools `key_prefix` replaces everything before the `#`. [`python_json_dumps`] writes
//! a JSON value exactly as Python's `json.dumps(value, sort_keys=True)` does (the text
//! Powertools hashes, and stores as `data`), so the hash matches byte for byte.
//!
//! ```
//! use sqs_claim::powertools::{PowertoolsFormat, python_json_dumps};
//! use serde_json::json;
//!
//! let format = PowertoolsFormat::new("orders-fn", "app.record_handler");
//! // `@idempotent_function(...)` with `event_key_jmespath="messageId"`:
//! let key = format.key(&json!("059f36b4-87a3-44ab-83d2-661975830a7d"));
//! assert!(key.starts_with("orders-fn.app.record_handler#"));
//! assert_eq!(python_json_dumps(&json!({"b": 1.5e-7, "a": "é"})), r#"{"a": "\u00e9", "b": 1.5e-07}"#);
//! ```
//!
//! The behaviour reproduced here is read from Powertools' source
//! (`aws_lambda_powertools/utilities/idempotency/persistence/base.py`, `base.py`,
//! `persistence/dynamodb.py`) and checked against Powertools itself (`tests/suite/test_powertools.rs`
//! runs it). docs/powertools.md is the migration guide.
//!
//! # Limits of the byte-for-byte match
//!
//! * A [`serde_json::Value`] holds integers only within `i64`/`u64`; a larger integer in a
//!   body becomes a float there, and Python keeps it exact. `python_json_dumps_text` (crate-private) reads
//!   the JSON text itself and keeps every number as Python's `json.loads` would (exact
//!   integers, correctly rounded floats), so keys derived from a message body use it.
//! * Strings with lone surrogates (`"\ud800"`), which Python accepts and Rust strings cannot
//!   hold, are refused; numbers out of `f64`'s range (`1e400`, `Infinity` to Python) likewise.
//!
//! Feature `powertools`.
//!
//! [`DynamoDbAttributes::default()`]: crate::store::dynamodb::DynamoDbAttributes

use std::collections::BTreeMap;
use std::fmt::Write as _;

use aws_lambda_events::sqs::SqsMessage;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::{Error, ErrorKind, KeySource};

/// The environment variable Powertools reads the function name from.
const FUNCTION_NAME_ENV: &str = "AWS_LAMBDA_FUNCTION_NAME";

/// What Powertools puts in a key when `AWS_LAMBDA_FUNCTION_NAME` is unset (tests, local runs).
pub(crate) const DEFAULT_FUNCTION_NAME: &str = "test-func";

/// The hash Powertools applies to the selected data (`IdempotencyConfig(hash_function=...)`,
/// a `hashlib` name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum HashFunction {
    /// `md5`, Powertools' default.
    #[default]
    Md5,
    /// `sha256`.
    Sha256,
}

/// `md5` or `sha256`, as Powertools' `hash_function` names them (`SQS_CLAIM_POWERTOOLS_HASH`).
impl std::str::FromStr for HashFunction {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "md5" => Ok(HashFunction::Md5),
            "sha256" => Ok(HashFunction::Sha256),
            other => Err(Error::new(
                ErrorKind::Config,
                format!("{other:?}: expected md5 or sha256 (Powertools' hash_function)"),
            )),
        }
    }
}

impl HashFunction {
    /// Lowercase hex digest of `bytes`, as Python's `hexdigest()` writes it.
    pub(crate) fn hex(self, bytes: &[u8]) -> String {
        match self {
            HashFunction::Md5 => {
                use md5::Digest as _;
                hex::encode(md5::Md5::digest(bytes))
            }
            HashFunction::Sha256 => crate::key::sha256_hex(bytes),
        }
    }
}

/// Idempotency keys and payload hashes as Powertools for AWS Lambda (Python) computes them.
///
/// The key is `{prefix}#{hash(datum)}`, the prefix `{function_name}.{handler}` (or a
/// Powertools `key_prefix`). `handler` is the Python function's `{module}.{qualname}`:
/// `app.lambda_handler` for an `@idempotent` handler `lambda_handler` in `app.py`,
/// `app.record_handler` for an `@idempotent_function` record handler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PowertoolsFormat {
    prefix: String,
    hash: HashFunction,
    validation: Option<RecordPayload>,
}

impl PowertoolsFormat {
    /// The format of a function named `function_name` (the Lambda function's name, as in
    /// `AWS_LAMBDA_FUNCTION_NAME`) whose decorated Python function is `handler`
    /// (`{module}.{qualname}`, e.g. `app.lambda_handler`).
    pub fn new(function_name: impl AsRef<str>, handler: impl AsRef<str>) -> Self {
        PowertoolsFormat {
            prefix: format!("{}.{}", function_name.as_ref(), handler.as_ref()),
            hash: HashFunction::Md5,
            validation: None,
        }
    }

    /// As Powertools configures itself: the function name from `AWS_LAMBDA_FUNCTION_NAME`,
    /// `test-func` (`DEFAULT_FUNCTION_NAME`) when it is unset. An empty value is used as
    /// is, as Python's `os.getenv` returns it.
    pub fn from_env(handler: impl AsRef<str>) -> Self {
        let name =
            std::env::var(FUNCTION_NAME_ENV).unwrap_or_else(|_| DEFAULT_FUNCTION_NAME.to_owned());
        PowertoolsFormat::new(name, handler)
    }

    /// A Powertools `key_prefix` (`@idempotent(key_prefix=...)`): the key is
    /// `{key_prefix}#{hash}`, with no function name or handler in it.
    pub fn with_key_prefix(key_prefix: impl Into<String>) -> Self {
        PowertoolsFormat {
            prefix: key_prefix.into(),
            hash: HashFunction::Md5,
            validation: None,
        }
    }

    /// The hash function (`IdempotencyConfig(hash_function=...)`). Default md5.
    pub fn with_hash_function(mut self, hash: HashFunction) -> Self {
        self.hash = hash;
        self
    }

    /// Everything before the key's `#`.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The hash function in use.
    pub fn hash_function(&self) -> HashFunction {
        self.hash
    }

    /// The stored key of `datum`, the value Powertools' `event_key_jmespath` selects (the
    /// whole event when there is none): `{prefix}#{hash(datum)}`.
    ///
    /// Powertools does not key a datum its `_is_missing_idempotency_key` counts as missing
    /// (`null`, an empty list or object, ...); it runs the function without idempotency
    /// instead.
    pub fn key(&self, datum: &Value) -> String {
        format!("{}#{}", self.prefix, self.hash(datum))
    }

    /// [`key`](Self::key) of the JSON text `datum`, read as Python's `json.loads` reads it
    /// (exact integers of any size, correctly rounded floats): see the module docs.
    pub(crate) fn key_of_text(&self, datum: &str) -> Result<String, Error> {
        Ok(format!("{}#{}", self.prefix, self.hash_text(datum)?))
    }

    /// The hash of `value` as Powertools computes it, for the key and for the `validation`
    /// attribute (the payload hash, of what `payload_validation_jmespath` selects): the hex
    /// digest of `json.dumps(value, sort_keys=True)`.
    pub(crate) fn hash(&self, value: &Value) -> String {
        self.hash.hex(python_json_dumps(value).as_bytes())
    }

    /// `hash` of the JSON text `value`, its numbers kept as Python reads them.
    pub(crate) fn hash_text(&self, value: &str) -> Result<String, Error> {
        Ok(self.hash.hex(python_json_dumps_text(value)?.as_bytes()))
    }
}

/// Keys and fingerprints the Powertools way, for either front door.
///
/// The SQS processor's ([`ProcessorBuilder::key_format`](crate::ProcessorBuilder::key_format)):
/// [`KeyFormat::record_key`](crate::claim::KeyFormat::record_key) and
/// [`KeyFormat::record_fingerprint`](crate::claim::KeyFormat::record_fingerprint) (below). The
/// idempotency layer's: the key is [`PowertoolsFormat::key`] of the extractor's datum (the layer's namespace does not enter
/// it: the prefix is Powertools'), the fingerprint the payload hash (`hashlib.md5(json.dumps(..))` by default) of the
/// request, which is Powertools' `validation` of `payload_validation_jmespath="powertools_json(body)"`
/// for an API Gateway event with a JSON body (`"body"` for one that is not JSON), and of
/// `"@"` for a `LambdaEvent<serde_json::Value>`.
///
/// With the idempotency layer (feature `idempotency`):
///
#[cfg_attr(feature = "idempotency", doc = "```")]
#[cfg_attr(not(feature = "idempotency"), doc = "```ignore")]
/// use sqs_claim::MemoryStore;
/// use sqs_claim::idempotency::{Idempotency, key};
/// use sqs_claim::powertools::PowertoolsFormat;
///
/// // @idempotent(event_key_jmespath='headers."Idempotency-Key"') on app.lambda_handler
/// let idempotency = Idempotency::builder(MemoryStore::new(), key::json_pointer("/transfer_id"))
///     .key_format(PowertoolsFormat::new("transfers-fn", "app.lambda_handler"))
///     .build();
/// # let _ = idempotency;
/// ```
impl crate::claim::KeyFormat for PowertoolsFormat {
    fn stored_key(&self, _namespace: &str, datum: &Value) -> String {
        self.key(datum)
    }

    fn fingerprint(&self, request: &Value) -> String {
        self.hash(request)
    }

    /// Powertools' `validation` hash covers what `payload_validation_jmespath` selects (the
    /// body, for an API handler), never the route: the route is left out so both sides agree.
    fn route_fingerprint(&self, _route: Option<&Value>, request: &Value) -> String {
        self.hash(request)
    }

    /// The stored key of an SQS record whose key comes from `source`, as a Powertools
    /// `@idempotent_function` record handler keys it, or `None` if Powertools would find no
    /// key (Powertools' `_is_missing_idempotency_key`). What each source is to Powertools' `event_key_jmespath`:
    ///
    /// | `KeySource` | `event_key_jmespath` | hashed |
    /// |---|---|---|
    /// | `MessageId` | `messageId` | the id, a JSON string |
    /// | `JsonPointer("/a/b")` | `powertools_json(body).a.b` | the JSON value there, numbers as written |
    /// | `MessageAttribute("N")` | `messageAttributes.N.stringValue` | the string |
    /// | `DeduplicationId` | `attributes.MessageDeduplicationId` | the string |
    /// | `BodySha256` | `body` | the body, a JSON string (identical bodies, one key) |
    /// | `EnvelopeId` | `powertools_json(body).MessageId` (SNS), `powertools_json(body).id` (EventBridge) | the id, a JSON string |
    ///
    /// `payload` is the record's body, or, with an [`Envelope`](crate::Envelope) on the
    /// processor, the payload the envelope wraps: so `JsonPointer("/a")` under SNS is
    /// `powertools_json(powertools_json(body).Message).a`. The processor keys `EnvelopeId`
    /// itself ([`PowertoolsFormat::key`] of the id): this method finds no envelope id.
    ///
    /// The namespace does not enter it. Errors (kind `MissingKey`) when the pointer's body is not JSON, never naming the body.
    fn record_key(
        &self,
        _namespace: &str,
        source: &KeySource,
        record: &SqsMessage,
        payload: &str,
    ) -> Result<Option<String>, Error> {
        self.payload_key(source, record, payload)
    }

    /// The `validation` hash of an SQS record under [`with_record_validation`]
    /// (`None` without it, or when the body is not the JSON it names).
    ///
    /// [`with_record_validation`]: Self::with_record_validation
    fn record_fingerprint(&self, _record: &SqsMessage, payload: &str) -> Option<String> {
        self.payload_fingerprint(payload)
    }
}

/// What a Powertools `payload_validation_jmespath` selects from an SQS record, for the
/// processor's payload fingerprint ([`PowertoolsFormat::with_record_validation`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecordPayload {
    /// `"body"`: the body as a string.
    Body,
    /// `"powertools_json(body)"` (pointer `""`) or `"powertools_json(body).a.b"` (pointer
    /// `"/a/b"`): the JSON value in the body at an RFC 6901 pointer.
    BodyJson(String),
}

/// `body`, or `json:/pointer` for `powertools_json(body)` at that pointer (`json:/a/b` for
/// `powertools_json(body).a.b`, `json:` for the whole body), as `SQS_CLAIM_POWERTOOLS_VALIDATION`
/// spells Powertools' `payload_validation_jmespath`.
impl std::str::FromStr for RecordPayload {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if s == "body" {
            return Ok(RecordPayload::Body);
        }
        match s.strip_prefix("json:") {
            Some(ptr) if ptr.is_empty() || ptr.starts_with('/') => {
                Ok(RecordPayload::BodyJson(ptr.to_owned()))
            }
            _ => Err(Error::new(
                ErrorKind::Config,
                format!(
                    "{s:?}: expected body or json:/pointer (json:/amount for \
                     powertools_json(body).amount, json: for powertools_json(body))"
                ),
            )),
        }
    }
}

impl PowertoolsFormat {
    /// The payload validation the Powertools side uses (`payload_validation_jmespath`), so
    /// that a processor built with this format
    /// ([`ProcessorBuilder::key_format`](crate::ProcessorBuilder::key_format)) stores and
    /// compares the same `validation` hash. Without it, that processor fingerprints nothing, as Powertools
    /// validates nothing by default: a `validation` hash of one side would never equal the
    /// other's.
    pub fn with_record_validation(mut self, payload: RecordPayload) -> Self {
        self.validation = Some(payload);
        self
    }

    /// The key of `msg` whose body (or the payload an envelope in it wraps) is `payload`
    /// ([`KeyFormat::record_key`](crate::claim::KeyFormat::record_key)).
    fn payload_key(
        &self,
        source: &KeySource,
        msg: &SqsMessage,
        payload: &str,
    ) -> Result<Option<String>, Error> {
        let string_key = |s: Option<&String>| {
            s.filter(|s| !s.is_empty())
                .map(|s| self.key(&Value::String(s.clone())))
        };
        Ok(match source {
            KeySource::MessageId => string_key(msg.message_id.as_ref()),
            KeySource::MessageAttribute(name) => string_key(
                msg.message_attributes
                    .get(name)
                    .and_then(|a| a.string_value.as_ref()),
            ),
            KeySource::DeduplicationId => string_key(msg.attributes.get("MessageDeduplicationId")),
            KeySource::EnvelopeId => None,
            KeySource::BodySha256 => {
                (!payload.is_empty()).then(|| self.key(&Value::String(payload.to_owned())))
            }
            KeySource::JsonPointer(ptr) => match body_json_at(payload, ptr).map_err(|e| {
                Error::new(
                    ErrorKind::MissingKey,
                    format!("cannot read key {ptr:?}: {}", e.message()),
                )
            })? {
                Some(raw) => Some(self.key_of_text(&raw)?),
                None => None,
            },
        })
    }

    /// The fingerprint of a record whose body (or the payload an envelope in it wraps) is
    /// `payload` ([`KeyFormat::record_fingerprint`](crate::claim::KeyFormat::record_fingerprint)).
    fn payload_fingerprint(&self, payload: &str) -> Option<String> {
        match self.validation.as_ref()? {
            RecordPayload::Body => Some(self.hash(&Value::String(payload.to_owned()))),
            // Powertools hashes what JMESPath finds, `null` for nothing.
            RecordPayload::BodyJson(ptr) => match crate::pointer::find_raw(payload, ptr).ok()? {
                Some(raw) => self.hash_text(&raw).ok(),
                None => Some(self.hash(&Value::Null)),
            },
        }
    }
}

/// The raw text of the JSON value at `ptr` in `body`, `None` if there is nothing there or
/// Powertools would count it as no key.
fn body_json_at<'b>(body: &'b str, ptr: &str) -> Result<Option<std::borrow::Cow<'b, str>>, Error> {
    let raw = crate::pointer::find_raw(body, ptr).map_err(not_json)?;
    Ok(match raw {
        Some(raw) => {
            let value: Value = serde_json::from_str(&raw).map_err(not_json)?;
            (!is_missing_key(&value)).then_some(raw)
        }
        None => None,
    })
}

/// Whether Powertools counts `datum` as "no idempotency key" (`is_missing_idempotency_key`):
/// `null`, an empty string, an empty array or one of only `null`s, an object whose values are
/// all `null` (the empty object included). Numbers and booleans, `0` and `false` included,
/// are keys.
pub(crate) fn is_missing_key(datum: &Value) -> bool {
    match datum {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(items) => items.iter().all(Value::is_null),
        Value::Object(map) => map.values().all(Value::is_null),
        Value::Bool(_) | Value::Number(_) => false,
    }
}

/// `value` as Python's `json.dumps(value, sort_keys=True)` writes it, the call Powertools
/// hashes keys and payloads with and stores responses as (`cls=Encoder` changes nothing for
/// JSON values): `", "` and `": "` as separators, object members sorted by name (code point
/// order), everything outside printable ASCII escaped (`\u00e9`, surrogate pairs above the
/// BMP, lowercase hex), floats as Python's `repr` (`1e-07`, `1e+16`, `100.0`).
pub fn python_json_dumps(value: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, value);
    out
}

/// [`python_json_dumps`] of the JSON text `text`, read as Python's `json.loads` reads it:
/// integers exact whatever their size (`-0` is `0`), other numbers correctly rounded to the
/// nearest `f64`, duplicate member names the last one winning. This is the text Powertools
/// hashes for a value it parsed from an event or a body (`powertools_json(body)`).
pub(crate) fn python_json_dumps_text(text: &str) -> Result<String, Error> {
    let raw: &RawValue = serde_json::from_str(text).map_err(not_json)?;
    let mut out = String::new();
    write_raw(&mut out, raw)?;
    Ok(out)
}

fn not_json(e: serde_json::Error) -> Error {
    // Line and column only: the text may be a message body.
    Error::new(
        ErrorKind::BadBody,
        format!(
            "not JSON Python can read (error at line {} column {})",
            e.line(),
            e.column()
        ),
    )
}

fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                let _ = write!(out, "{i}");
            } else if let Some(u) = n.as_u64() {
                let _ = write!(out, "{u}");
            } else if let Some(f) = n.as_f64() {
                out.push_str(&python_float_repr(f));
            }
        }
        Value::String(s) => write_str(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            // Sorted whatever the map's own order (`preserve_order` may be on in the tree):
            // `str`'s order is UTF-8 byte order, which is code point order, as Python sorts.
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            members.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (name, item)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_str(out, name);
                out.push_str(": ");
                write_value(out, item);
            }
            out.push('}');
        }
    }
}

fn write_raw(out: &mut String, raw: &RawValue) -> Result<(), Error> {
    let text = raw.get();
    match text.as_bytes().first() {
        Some(b'{') => {
            // A BTreeMap: sorted by name, and a repeated name keeps its last value, as a
            // Python dict built by `json.loads` does.
            let map: BTreeMap<String, &RawValue> = serde_json::from_str(text).map_err(not_json)?;
            out.push('{');
            for (i, (name, item)) in map.into_iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_str(out, &name);
                out.push_str(": ");
                write_raw(out, item)?;
            }
            out.push('}');
        }
        Some(b'[') => {
            let items: Vec<&RawValue> = serde_json::from_str(text).map_err(not_json)?;
            out.push('[');
            for (i, item) in items.into_iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_raw(out, item)?;
            }
            out.push(']');
        }
        Some(b'"') => {
            let s: String = serde_json::from_str(text).map_err(not_json)?;
            write_str(out, &s);
        }
        Some(b'-' | b'0'..=b'9') => write_number_text(out, text)?,
        // `true`, `false`, `null`: already as Python writes them.
        _ => out.push_str(text),
    }
    Ok(())
}

/// A JSON number's text as Python writes the number `json.loads` makes of it: an integer (no
/// `.`, `e` or `E`) as its digits, any other as the `repr` of the nearest float.
fn write_number_text(out: &mut String, text: &str) -> Result<(), Error> {
    if text.bytes().any(|b| matches!(b, b'.' | b'e' | b'E')) {
        let f: f64 = text.parse().map_err(|_| {
            Error::new(
                ErrorKind::BadBody,
                "a JSON number Rust cannot read as a float",
            )
        })?;
        if !f.is_finite() {
            return Err(Error::new(
                ErrorKind::BadBody,
                "a JSON number out of the float range (Python reads it as Infinity)",
            ));
        }
        out.push_str(&python_float_repr(f));
    } else {
        // JSON integers have no leading zeros, so the text is already Python's `str(int)`,
        // except for negative zero, which is the integer 0.
        let digits = text.strip_prefix('-').unwrap_or(text);
        if digits.bytes().all(|b| b == b'0') {
            out.push('0');
        } else {
            out.push_str(text);
        }
    }
    Ok(())
}

/// A JSON string as Python's `json.dumps` writes it with `ensure_ascii=True` (its default):
/// `\"`, `\\`, `\n`, `\r`, `\t`, `\b`, `\f` as such; every other character outside `' '..='~'`
/// as `\uXXXX` in lowercase hex, a character above U+FFFF as its UTF-16 surrogate pair.
fn write_str(out: &mut String, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str("\\u");
                    for shift in [12, 8, 4, 0] {
                        out.push(char::from(HEX[usize::from((*unit >> shift) & 0xf)]));
                    }
                }
            }
        }
    }
    out.push('"');
}

/// `repr(f)` as Python writes a float (and so `json.dumps`): the shortest digits that read
/// back as `f`, in positional notation when the decimal exponent is from -4 to 15 (`0.0001`,
/// `1e+16` beyond, `1e-05` below), with `.0` on an integral value, a two-digit exponent at
/// least. `NaN`, `Infinity` and `-Infinity` as `json.dumps` writes them.
pub(crate) fn python_float_repr(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    // Rust's `{:e}` writes the shortest round-trip digits, as Python's repr chooses them
    // (both pick the nearest to the exact value among the shortest): `d.ddde<exp>`.
    let sci = format!("{:e}", f.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    // Python's `decpt`: the value is 0.<digits> x 10^decpt.
    let decpt = exp + 1;
    let mut out = String::new();
    if f.is_sign_negative() {
        out.push('-');
    }
    if !(-4 < decpt && decpt <= 16) {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let _ = write!(
            out,
            "e{}{:02}",
            if exp < 0 { '-' } else { '+' },
            exp.unsigned_abs()
        );
    } else if decpt <= 0 {
        out.push_str("0.");
        for _ in 0..(-decpt) {
            out.push('0');
        }
        out.push_str(&digits);
    } else {
        let point = decpt as usize;
        if digits.len() <= point {
            out.push_str(&digits);
            for _ in digits.len()..point {
                out.push('0');
            }
            out.push_str(".0");
        } else {
            out.push_str(&digits[..point]);
            out.push('.');
            out.push_str(&digits[point..]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn float_repr_follows_python() {
        // Each pair: (value, Python's repr).
        for (f, want) in [
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (1.0, "1.0"),
            (1.5, "1.5"),
            (0.1, "0.1"),
            (100.0, "100.0"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (1.5e16, "1.5e+16"),
            (1e20, "1e+20"),
            (123456789012345680.0, "1.2345678901234568e+17"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1e-7, "1e-07"),
            (1.5e-7, "1.5e-07"),
            (1e100, "1e+100"),
            (5e-324, "5e-324"),
            (f64::MAX, "1.7976931348623157e+308"),
            (-2.5e-5, "-2.5e-05"),
            (9999999999999998.0, "9999999999999998.0"),
            (0.3, "0.3"),
            (2.0 / 3.0, "0.6666666666666666"),
        ] {
            assert_eq!(python_float_repr(f), want, "{f:e}");
        }
    }

    #[test]
    fn strings_are_escaped_as_ensure_ascii() {
        assert_eq!(
            python_json_dumps(&json!("a\"b\\c\n\r\t\u{8}\u{c}\u{1}\u{7f}é😀/")),
            r#""a\"b\\c\n\r\t\b\f\u0001\u007f\u00e9\ud83d\ude00/""#
        );
    }

    #[test]
    fn text_keeps_numbers_as_python_reads_them() {
        assert_eq!(
            python_json_dumps_text(r#"{"b": 123456789012345678901234567890, "a": -0, "c": 1E2}"#)
                .unwrap(),
            r#"{"a": 0, "b": 123456789012345678901234567890, "c": 100.0}"#
        );
        assert_eq!(
            python_json_dumps_text(r#"{"a":1,"a":2}"#).unwrap(),
            r#"{"a": 2}"#
        );
        let err = python_json_dumps_text("not json {secret}").unwrap_err();
        assert!(!err.to_string().contains("secret"));
    }

    #[test]
    fn missing_keys_as_powertools_judges_them() {
        for missing in [
            json!(null),
            json!(""),
            json!([]),
            json!([null]),
            json!({}),
            json!({"a": null}),
        ] {
            assert!(is_missing_key(&missing), "{missing}");
        }
        for present in [
            json!(0),
            json!(false),
            json!("x"),
            json!([null, 1]),
            json!({"a": 0}),
        ] {
            assert!(!is_missing_key(&present), "{present}");
        }
    }

    /// The processor reads records through the trait: it must be Powertools' record key and
    /// validation, not the trait's defaults (the string of the raw key, the body's hash).
    #[test]
    fn the_key_format_of_a_record_is_powertools_own() {
        use crate::claim::KeyFormat;
        let mut record = SqsMessage::default();
        record.message_id = Some("m-1".into());
        record.body = Some(r#"{"order_id": 42}"#.into());
        let source = KeySource::JsonPointer("/order_id".into());
        let plain = PowertoolsFormat::new("fn", "app.handler");
        let body = record.body.as_deref().unwrap_or_default();
        let format: &dyn KeyFormat = &plain;
        assert_eq!(
            format
                .record_key("ignored", &source, &record, body)
                .unwrap(),
            format.record_key("other", &source, &record, body).unwrap(),
            "the namespace does not enter a Powertools key"
        );
        assert_eq!(
            format
                .record_key("ignored", &source, &record, body)
                .unwrap(),
            Some(plain.key(&json!(42)))
        );
        assert_eq!(format.record_fingerprint(&record, body), None);
        let validating = plain.with_record_validation(RecordPayload::Body);
        let format: &dyn KeyFormat = &validating;
        assert_eq!(
            format.record_fingerprint(&record, body),
            Some(validating.hash(&Value::String(body.to_owned())))
        );
    }

    #[test]
    fn key_is_prefix_hash() {
        let f = PowertoolsFormat::new("fn", "app.handler");
        // md5 of "\"abc\"" (the JSON text of the string).
        assert_eq!(
            f.key(&json!("abc")),
            format!("fn.app.handler#{}", HashFunction::Md5.hex(b"\"abc\""))
        );
        assert_eq!(
            PowertoolsFormat::with_key_prefix("p").key(&json!(1)),
            format!("p#{}", HashFunction::Md5.hex(b"1"))
        );
        assert_eq!(
            HashFunction::Md5.hex(b""),
            "d41d8cd98f00b204e9800998ecf8427e"
        );
    }
}
