//! [`DynamoDbSettings`]: the client's timeouts and retries.

use super::*;

/// How the client [`DynamoDbStore::from_sdk_config`] builds bounds its calls ([`DynamoDbStore::from_env`]
/// uses the defaults). Change a field on the defaults: the struct is `non_exhaustive`, so a
/// setting added later keeps your code compiling.
///
/// The defaults fit a Lambda invocation and tell a dark endpoint from a slow one. A DynamoDB
/// write answers in single-digit milliseconds; an attempt still unanswered after 4 s is lost,
/// not slow (an answer seconds late, from a congested link or an overloaded proxy, still
/// arrives within it and is used), and is better retried on a fresh connection. The operation
/// timeout (5 s) cuts the whole call, retries included: a store that went dark costs a message
/// at most 5 s, well inside the default 30 s function timeout, and leaves time to answer the
/// batch. Connecting takes a round trip or two inside a region: 1 s is generous.
///
/// ```
/// use std::time::Duration;
/// use sqs_claim::store::dynamodb::DynamoDbSettings;
///
/// let mut settings = DynamoDbSettings::default();
/// settings.attempt_timeout = Duration::from_millis(500);
/// settings.max_attempts = 2;
/// assert_eq!(settings.operation_timeout, Duration::from_secs(5));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct DynamoDbSettings {
    /// How long opening a connection may take. Default 1 s.
    pub connect_timeout: Duration,
    /// How long one attempt may take, from sending to the whole answer. Default 4 s.
    pub attempt_timeout: Duration,
    /// How long a whole call may take, every attempt and backoff included. Default 5 s.
    pub operation_timeout: Duration,
    /// Attempts per call, the first included (standard retry mode; 1 disables the SDK's
    /// retries). Default 3.
    pub max_attempts: u32,
    /// The SDK's first backoff (it adds full jitter). Default 50 ms.
    pub(crate) initial_backoff: Duration,
    /// The SDK's longest backoff. Default 1 s.
    pub(crate) max_backoff: Duration,
}

impl Default for DynamoDbSettings {
    fn default() -> Self {
        DynamoDbSettings {
            connect_timeout: Duration::from_secs(1),
            attempt_timeout: Duration::from_secs(4),
            operation_timeout: Duration::from_secs(5),
            max_attempts: 3,
            initial_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(1),
        }
    }
}

impl DynamoDbSettings {
    /// Applies these settings to an SDK configuration builder.
    pub(super) fn apply(
        &self,
        builder: aws_sdk_dynamodb::config::Builder,
    ) -> aws_sdk_dynamodb::Config {
        use aws_sdk_dynamodb::config::retry::RetryConfig;
        use aws_sdk_dynamodb::config::timeout::TimeoutConfig;
        builder
            .retry_config(
                RetryConfig::standard()
                    .with_max_attempts(self.max_attempts.max(1))
                    .with_initial_backoff(self.initial_backoff)
                    .with_max_backoff(self.max_backoff),
            )
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(self.connect_timeout)
                    .operation_attempt_timeout(self.attempt_timeout)
                    .operation_timeout(self.operation_timeout)
                    .build(),
            )
            .build()
    }
}
