use aws_lambda_events::apigw::{ApiGatewayProxyRequest, ApiGatewayV2httpRequest};
use aws_lambda_events::http::HeaderMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use super::Payload;
use super::answers::{Answers, HttpAnswers};
use crate::Error;

/// The answers of both API Gateway events.
static HTTP_ANSWERS: HttpAnswers = HttpAnswers::new();

/// The body as a request: its JSON, or its text when it is not JSON; a base64-encoded body
/// decoded first (kept as sent if it does not decode to UTF-8 text); `null` without a body.
fn body_request(body: Option<&str>, base64: bool) -> Value {
    let parse =
        |text: &str| serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()));
    match body {
        None => Value::Null,
        Some(text) if base64 => {
            use base64::Engine as _;
            match base64::engine::general_purpose::STANDARD
                .decode(text.trim())
                .ok()
                .and_then(|bytes| String::from_utf8(bytes).ok())
            {
                Some(decoded) => parse(&decoded),
                None => Value::String(text.to_owned()),
            }
        }
        Some(text) => parse(text),
    }
}

/// Query parameters as one value for both payload formats: each name with its values joined
/// by commas (how payload format 2.0 delivers repeated parameters), names sorted.
fn query(map: &aws_lambda_events::query_map::QueryMap) -> Value {
    let mut joined: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
    for (name, value) in map.iter() {
        joined.entry(name).or_default().push(value);
    }
    Value::Object(
        joined
            .into_iter()
            .map(|(name, values)| (name.to_owned(), Value::String(values.join(","))))
            .collect(),
    )
}

/// Header `name` in `headers` (case-insensitive: header names are kept lower-cased, and the
/// lookup lower-cases `name`). A value that is not visible ASCII is treated as absent.
fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// REST API (payload format 1.0). `multiValueHeaders` is read when `headers` lacks the name.
impl Payload for ApiGatewayProxyRequest {
    fn request(&self) -> Result<Value, Error> {
        Ok(body_request(self.body.as_deref(), self.is_base64_encoded))
    }

    /// The method, the path as requested (path parameters in it) and the query parameters.
    fn route(&self) -> Option<Value> {
        Some(serde_json::json!({
            "method": self.http_method.as_str(),
            "path": self.path,
            "query": query(if self.multi_value_query_string_parameters.is_empty() {
                &self.query_string_parameters
            } else {
                &self.multi_value_query_string_parameters
            }),
        }))
    }

    fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name).or_else(|| header(&self.multi_value_headers, name))
    }

    fn default_answers() -> &'static dyn Answers {
        &HTTP_ANSWERS
    }
}

/// HTTP API (payload format 2.0). Repeated headers arrive joined with commas, as API Gateway
/// sends them.
impl Payload for ApiGatewayV2httpRequest {
    fn request(&self) -> Result<Value, Error> {
        Ok(body_request(self.body.as_deref(), self.is_base64_encoded))
    }

    /// The method, the raw path and the query parameters.
    fn route(&self) -> Option<Value> {
        Some(serde_json::json!({
            "method": self.request_context.http.method.as_str(),
            "path": self.raw_path,
            "query": query(&self.query_string_parameters),
        }))
    }

    fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }

    fn default_answers() -> &'static dyn Answers {
        &HTTP_ANSWERS
    }
}

/// An API Gateway request of either payload format: an HTTP API event (`"version": "2.0"`) or
/// a REST API / HTTP API 1.0 event (anything else). A handler that takes it serves both, and
/// its answer (`statusCode`, `headers`, `body`) suits both.
///
/// ```
/// use sqs_claim::idempotency::ApiGatewayRequest;
///
/// let rest: ApiGatewayRequest = serde_json::from_str(
///     r#"{"httpMethod": "POST", "path": "/payments", "headers": {"Idempotency-Key": "k-1"},
///         "requestContext": {"httpMethod": "POST"}, "body": "{}", "isBase64Encoded": false}"#,
/// )?;
/// assert_eq!(rest.body(), Some("{}"));
/// # Ok::<(), serde_json::Error>(())
/// ```
///
/// `Debug` shows the payload format, the method, the path, the body's length and the header
/// names: never the body, header values (an `Authorization`, a cookie) or the query.
///
/// The API Gateway events (feature `apigw`): REST API (`ApiGatewayProxyRequest`, payload
/// format 1.0) and HTTP API (`ApiGatewayV2httpRequest`, payload format 2.0).
///
/// For both, the request the fingerprint covers and [`json_pointer`](super::key::json_pointer)
/// reads is the **body**: parsed as JSON when it is JSON, else the body text as is. A body API
/// Gateway base64-encoded (`isBase64Encoded: true`, as it sends binary media types, and some
/// clients' JSON) is decoded first; if it is not valid base64 or not UTF-8 text, the request is
/// its base64 text as sent (a pointer then finds nothing in it). Headers are read case-insensitively ([`header`](super::key::header)).
/// Refusals are answered with HTTP responses ([`HttpAnswers`]: 409, 422, 400), which both
/// payload formats accept.
#[derive(Clone)]
pub enum ApiGatewayRequest {
    /// A REST API event (payload format 1.0).
    Rest(Box<ApiGatewayProxyRequest>),
    /// An HTTP API event (payload format 2.0).
    Http(Box<ApiGatewayV2httpRequest>),
}

impl ApiGatewayRequest {
    /// The body as API Gateway sent it (base64 when `is_base64_encoded`).
    pub fn body(&self) -> Option<&str> {
        match self {
            ApiGatewayRequest::Rest(r) => r.body.as_deref(),
            ApiGatewayRequest::Http(r) => r.body.as_deref(),
        }
    }

    /// The body as text, decoded from base64 when API Gateway encoded it; `None` without a
    /// body, or when a base64 body is not valid base64 or not UTF-8.
    pub fn body_text(&self) -> Option<std::borrow::Cow<'_, str>> {
        let body = self.body()?;
        if !self.is_base64_encoded() {
            return Some(std::borrow::Cow::Borrowed(body));
        }
        use base64::Engine as _;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(body.trim())
            .ok()?;
        String::from_utf8(bytes).ok().map(std::borrow::Cow::Owned)
    }

    /// Whether API Gateway base64-encoded the body (`isBase64Encoded`: binary media types,
    /// some clients' JSON); [`body_text`](Self::body_text) decodes it.
    pub fn is_base64_encoded(&self) -> bool {
        match self {
            ApiGatewayRequest::Rest(r) => r.is_base64_encoded,
            ApiGatewayRequest::Http(r) => r.is_base64_encoded,
        }
    }

    /// The HTTP method (`POST`, ...): `httpMethod` of a REST API event,
    /// `requestContext.http.method` of an HTTP API event.
    pub fn method(&self) -> &str {
        match self {
            ApiGatewayRequest::Rest(r) => r.http_method.as_str(),
            ApiGatewayRequest::Http(r) => r.request_context.http.method.as_str(),
        }
    }

    /// The request path as requested (path parameters in it, no query): `path` of a REST API
    /// event, `rawPath` of an HTTP API event; `None` when the event has none.
    pub fn path(&self) -> Option<&str> {
        match self {
            ApiGatewayRequest::Rest(r) => r.path.as_deref(),
            ApiGatewayRequest::Http(r) => r.raw_path.as_deref(),
        }
    }
}

impl std::fmt::Debug for ApiGatewayRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (format, headers) = match self {
            ApiGatewayRequest::Rest(r) => ("rest", &r.headers),
            ApiGatewayRequest::Http(r) => ("http", &r.headers),
        };
        let names: Vec<&str> = headers.keys().map(|k| k.as_str()).collect();
        f.debug_struct("ApiGatewayRequest")
            .field("format", &format)
            .field("method", &self.method())
            .field("path", &self.path())
            .field("body_len", &self.body().map(str::len))
            .field("header_names", &names)
            .finish()
    }
}

impl<'de> Deserialize<'de> for ApiGatewayRequest {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        let v2 = value.get("version").and_then(Value::as_str) == Some("2.0");
        if v2 {
            serde_json::from_value(value)
                .map(|r| ApiGatewayRequest::Http(Box::new(r)))
                .map_err(serde::de::Error::custom)
        } else {
            serde_json::from_value(value)
                .map(|r| ApiGatewayRequest::Rest(Box::new(r)))
                .map_err(serde::de::Error::custom)
        }
    }
}

impl Serialize for ApiGatewayRequest {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            ApiGatewayRequest::Rest(r) => r.serialize(serializer),
            ApiGatewayRequest::Http(r) => r.serialize(serializer),
        }
    }
}

impl Payload for ApiGatewayRequest {
    fn request(&self) -> Result<Value, Error> {
        Ok(body_request(self.body(), self.is_base64_encoded()))
    }

    fn route(&self) -> Option<Value> {
        match self {
            ApiGatewayRequest::Rest(r) => r.route(),
            ApiGatewayRequest::Http(r) => r.route(),
        }
    }

    fn header(&self, name: &str) -> Option<&str> {
        match self {
            ApiGatewayRequest::Rest(r) => Payload::header(r.as_ref(), name),
            ApiGatewayRequest::Http(r) => Payload::header(r.as_ref(), name),
        }
    }

    fn default_answers() -> &'static dyn Answers {
        &HTTP_ANSWERS
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn headers_are_case_insensitive_and_the_body_is_the_request() {
        let event: ApiGatewayV2httpRequest = serde_json::from_value(json!({
            "version": "2.0",
            "routeKey": "POST /payments",
            "rawPath": "/payments",
            "headers": {"Idempotency-Key": "k-1", "content-type": "application/json"},
            "requestContext": {"http": {"method": "POST", "path": "/payments"}},
            "body": "{\"amount\": 5}",
            "isBase64Encoded": false
        }))
        .unwrap();
        assert_eq!(event.header("idempotency-key"), Some("k-1"));
        assert_eq!(event.header("IDEMPOTENCY-KEY"), Some("k-1"));
        assert_eq!(event.request().unwrap(), json!({"amount": 5}));
        let mut raw = event.clone();
        raw.body = Some("not json".into());
        assert_eq!(raw.request().unwrap(), json!("not json"));
    }

    #[test]
    fn a_base64_body_is_decoded_before_it_is_read() {
        let event: ApiGatewayProxyRequest = serde_json::from_value(json!({
            "resource": "/webhook",
            "path": "/webhook",
            "httpMethod": "POST",
            "headers": {"Content-Type": "application/json"},
            // {"id":"evt_1","amount":5}
            "body": "eyJpZCI6ImV2dF8xIiwiYW1vdW50Ijo1fQ==",
            "isBase64Encoded": true,
            "requestContext": {"httpMethod": "POST"}
        }))
        .unwrap();
        assert_eq!(
            event.request().unwrap(),
            json!({"id": "evt_1", "amount": 5})
        );
        let mut binary = event.clone();
        binary.body = Some("/w==".into()); // 0xFF: not UTF-8
        assert_eq!(binary.request().unwrap(), json!("/w=="));
        binary.body = Some("not base64!".into());
        assert_eq!(binary.request().unwrap(), json!("not base64!"));
    }

    #[test]
    fn either_payload_format_reads_the_same() {
        let v2: ApiGatewayRequest = serde_json::from_value(json!({
            "version": "2.0",
            "routeKey": "POST /payments",
            "rawPath": "/payments",
            "headers": {"idempotency-key": "k-1"},
            "requestContext": {"http": {"method": "POST", "path": "/payments"}},
            "body": "{\"amount\": 5}",
            "isBase64Encoded": false
        }))
        .unwrap();
        let v1: ApiGatewayRequest = serde_json::from_value(json!({
            "resource": "/payments",
            "path": "/payments",
            "httpMethod": "POST",
            "headers": {"Idempotency-Key": "k-1"},
            "multiValueHeaders": {"Idempotency-Key": ["k-1"]},
            "requestContext": {"httpMethod": "POST"},
            "body": "{\"amount\": 5}",
            "isBase64Encoded": false
        }))
        .unwrap();
        assert!(matches!(v2, ApiGatewayRequest::Http(_)));
        assert!(matches!(v1, ApiGatewayRequest::Rest(_)));
        for e in [&v1, &v2] {
            assert_eq!(Payload::header(e, "Idempotency-Key"), Some("k-1"));
            assert_eq!(e.request().unwrap(), json!({"amount": 5}));
            assert_eq!(e.method(), "POST");
            assert_eq!(e.path(), Some("/payments"));
            assert_eq!(e.body_text().as_deref(), Some("{\"amount\": 5}"));
        }
    }

    #[test]
    fn debug_shows_neither_the_body_nor_header_values() {
        let e: ApiGatewayRequest = serde_json::from_value(json!({
            "version": "2.0",
            "rawPath": "/payments",
            "rawQueryString": "secret-query=Q-SECRET",
            "headers": {"authorization": "Bearer TOKEN-SECRET", "idempotency-key": "k-1"},
            "requestContext": {"http": {"method": "POST", "path": "/payments"}},
            "body": "{\"card\": \"BODY-SECRET\"}",
            "isBase64Encoded": false
        }))
        .unwrap();
        let debug = format!("{e:?}");
        for secret in ["BODY-SECRET", "TOKEN-SECRET", "Q-SECRET", "k-1"] {
            assert!(!debug.contains(secret), "{secret} in {debug}");
        }
        assert!(
            debug.contains("POST") && debug.contains("authorization"),
            "{debug}"
        );
    }

    #[test]
    fn the_route_is_method_path_and_query() {
        let mut e: ApiGatewayV2httpRequest = serde_json::from_value(json!({
            "version": "2.0",
            "rawPath": "/accounts/A/withdraw",
            "rawQueryString": "",
            "requestContext": {"http": {"method": "POST", "path": "/accounts/A/withdraw"}},
            "body": "{\"amount\": 100}",
            "isBase64Encoded": false
        }))
        .unwrap();
        let a = e.route();
        e.raw_path = Some("/accounts/B/withdraw".into());
        assert_ne!(a, e.route(), "another path is another route");
        assert_eq!(a.unwrap()["method"], "POST");
    }
}
