//! The API Gateway events (feature `apigw`): REST API (`ApiGatewayProxyRequest`, payload
//! format 1.0) and HTTP API (`ApiGatewayV2httpRequest`, payload format 2.0).
//!
//! For both, the request the fingerprint covers and [`json_pointer`](super::key::json_pointer)
//! reads is the **body**: parsed as JSON when it is JSON, else the body text as is (a
//! base64-encoded body is not decoded: a pointer finds nothing in it, and its fingerprint is
//! that of its text). Headers are read case-insensitively ([`header`](super::key::header)).
//! Refusals are answered with HTTP responses ([`HttpAnswers`]: 409, 422, 400), which both
//! payload formats accept.

use aws_lambda_events::apigw::{ApiGatewayProxyRequest, ApiGatewayV2httpRequest};
use aws_lambda_events::http::HeaderMap;
use serde_json::Value;

use super::answers::{Answers, HttpAnswers};
use super::key::Payload;
use crate::Error;

/// The answers of both API Gateway events.
static HTTP_ANSWERS: HttpAnswers = HttpAnswers::new();

/// The body as a request: its JSON, or its text when it is not JSON (or base64-encoded);
/// `null` without a body.
fn body_request(body: Option<&str>, base64: bool) -> Value {
    match body {
        None => Value::Null,
        Some(text) if base64 => Value::String(text.to_owned()),
        Some(text) => serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned())),
    }
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

    fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
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
}
