//! Where a test finds the local stand-ins of AWS and of the stores, and names that never
//! collide.
//!
//! Each address comes from an environment variable, with the usual local port as the default,
//! so the same test runs on a laptop, in CI against service containers, and against a stand-in
//! started elsewhere:
//!
//! | stand-in | variable | default |
//! |----------|----------|---------|
//! | DynamoDB Local | `SQS_CLAIM_DYNAMODB_ENDPOINT` | `http://127.0.0.1:8000` |
//! | Redis | `SQS_CLAIM_REDIS_URL` | `redis://127.0.0.1:6379/` |
//! | PostgreSQL | `SQS_CLAIM_POSTGRES_URL` | `postgres://postgres@127.0.0.1:5432/test` |
//!
//! Tests running in parallel (and runs after a failed one) must not share state: give each its
//! own table, key prefix or namespace with [`unique_name`].
//!
//! ```
//! use sqs_claim_testkit::local;
//!
//! let endpoint = local::dynamodb_endpoint();
//! assert!(endpoint.starts_with("http"));
//! let table = local::unique_name("claims");
//! assert!(table.starts_with("claims-") && table != local::unique_name("claims"));
//! // With feature `dynamodb`, a store on a fresh table of DynamoDB Local:
//! //     let store = DynamoDbStore::new(local::dynamodb_client(&endpoint), table);
//! //     store.create_table().await?;
//! ```

/// `SQS_CLAIM_DYNAMODB_ENDPOINT`, default DynamoDB Local on `http://127.0.0.1:8000`.
pub fn dynamodb_endpoint() -> String {
    std::env::var("SQS_CLAIM_DYNAMODB_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:8000".into())
}

/// `SQS_CLAIM_REDIS_URL`, default Redis on `redis://127.0.0.1:6379/`.
pub fn redis_url() -> String {
    std::env::var("SQS_CLAIM_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into())
}

/// `SQS_CLAIM_POSTGRES_URL`, default PostgreSQL on 127.0.0.1:5432, user `postgres`, database
/// `test`.
pub fn pg_url() -> String {
    std::env::var("SQS_CLAIM_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// `{prefix}-<uuid>`: a table, queue or namespace name no other test (or run) uses. Valid as a
/// DynamoDB table name for a prefix of letters, digits, `-`, `_` and `.`; use
/// [`unique_identifier`] where a SQL identifier is needed.
pub fn unique_name(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4())
}

/// `{prefix}_<32 hex digits>`: as [`unique_name`], without dashes (a PostgreSQL table name,
/// say).
pub fn unique_identifier(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::new_v4().simple())
}

/// A DynamoDB client for `endpoint` (DynamoDB Local, or a [`fault`](crate::fault) proxy in
/// front of it) with test credentials, region `us-east-1`, and the SDK's default retry and
/// timeout settings.
#[cfg(feature = "dynamodb")]
#[cfg_attr(docsrs, doc(cfg(feature = "dynamodb")))]
pub fn dynamodb_client(endpoint: &str) -> aws_sdk_dynamodb::Client {
    use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "test"))
        .build();
    aws_sdk_dynamodb::Client::from_conf(config)
}
