//! The AWS configuration the stores and the publisher build their clients from.
//!
//! One difference from `aws_config::load_defaults`: the HTTPS client trusts the Mozilla root
//! certificates compiled into the binary (`webpki-root-certs`) instead of reading the
//! operating system's store. Reading that store (on Debian and Amazon Linux, a bundle file and
//! a directory of some 150 files, each parsed) was about half of a Lambda's init on the
//! development machine: 10–14 ms with it, 6–7 ms without (`scripts/measure-init.py`).
//!
//! `SQS_CLAIM_TLS_ROOTS=native` goes back to the operating system's store, for endpoints signed
//! by a private CA (a TLS-inspecting proxy, an on-premises endpoint).
//!
//! Another: credentials named by the environment (`AWS_ACCESS_KEY_ID` and
//! `AWS_SECRET_ACCESS_KEY`, as Lambda sets them) are taken from it without building the rest of
//! the SDK's default chain, which finds them first anyway (see [`load_config`]).

use aws_smithy_http_client::tls::{self, TlsContext, TrustStore};
use aws_smithy_http_client::{Builder, HttpClientError};
use aws_smithy_runtime_api::client::http::SharedHttpClient;
use base64::Engine as _;

/// The shared AWS configuration, from the standard environment (region, credentials,
/// endpoints), with the HTTPS client described in the [module documentation](self).
///
/// When `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY` are both set (always, inside Lambda),
/// the credentials are those variables', as the SDK's default chain would find them first; the
/// rest of that chain (profile files, web identity with its STS client, ECS, IMDS) is then not
/// built at all, which saves its memory and start-up work. Otherwise the default chain.
pub async fn load_config() -> aws_config::SdkConfig {
    let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest());
    if credentials_in_environment() {
        loader = loader.credentials_provider(
            aws_config::environment::EnvironmentVariableCredentialsProvider::new(),
        );
    }
    match https_client() {
        Some(client) => loader.http_client(client).load().await,
        None => loader.load().await,
    }
}

/// Whether the environment names credentials itself: the first place the SDK's default chain
/// looks, and where it stops when both are there.
fn credentials_in_environment() -> bool {
    ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"]
        .iter()
        .all(|var| std::env::var_os(var).is_some_and(|v| !v.is_empty()))
}

/// The HTTPS client on the bundled roots, or `None` for the SDK's default (the operating
/// system's store) when `SQS_CLAIM_TLS_ROOTS=native` asks for it or the bundle cannot be used.
pub(crate) fn https_client() -> Option<SharedHttpClient> {
    if std::env::var("SQS_CLAIM_TLS_ROOTS").is_ok_and(|v| v.trim() == "native") {
        return None;
    }
    match bundled() {
        Ok(client) => Some(client),
        Err(e) => {
            tracing::warn!(error = %e, "bundled root certificates unusable; using the system's");
            None
        }
    }
}

fn bundled() -> Result<SharedHttpClient, HttpClientError> {
    // The SDK's trust store takes PEM; the bundle is DER. Encoding ~150 certificates is
    // microseconds, and happens once per client.
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut pem = String::with_capacity(webpki_root_certs::TLS_SERVER_ROOT_CERTS.len() * 2048);
    for der in webpki_root_certs::TLS_SERVER_ROOT_CERTS {
        pem.push_str("-----BEGIN CERTIFICATE-----\n");
        let text = b64.encode(der.as_ref());
        for line in text.as_bytes().chunks(64) {
            // Base64 is ASCII: every chunk is valid UTF-8.
            pem.push_str(std::str::from_utf8(line).unwrap_or_default());
            pem.push('\n');
        }
        pem.push_str("-----END CERTIFICATE-----\n");
    }
    let context = TlsContext::builder()
        .with_trust_store(TrustStore::empty().with_pem_certificate(pem.into_bytes()))
        .build()?;
    Ok(Builder::new()
        .tls_provider(tls::Provider::Rustls(
            tls::rustls_provider::CryptoMode::AwsLc,
        ))
        .tls_context(context)
        .build_https())
}

/// An SQS client on `config` with its retries and timeouts set here rather than left to the
/// environment: the SDK retries a failed call (standard mode, 3 attempts, backoff from 50 ms
/// capped at 1 s), each attempt bounded at 2 s and the whole call at 4 s, like the DynamoDB
/// client. The publisher retries only entries that failed inside a `200` answer, which the SDK
/// cannot see: the two never stack. What the failure destination, the redelivery and the
/// publisher of a consumer configured from the environment use
/// ([`Settings::configure_sqs`](crate::settings::Settings::configure_sqs)).
#[cfg(feature = "sqs")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqs")))]
pub fn sqs_client(config: &aws_config::SdkConfig) -> aws_sdk_sqs::Client {
    let config = aws_sdk_sqs::config::Builder::from(config)
        .retry_config(three_attempts())
        .timeout_config(bounded(2, 4))
        .build();
    aws_sdk_sqs::Client::from_conf(config)
}

/// An S3 client on `config` for [`LargeMessages`](crate::large::LargeMessages) and the
/// publisher's offloading: retries and timeouts set here as for the SQS client (standard mode,
/// 3 attempts; 1 s to connect, each attempt 5 s and the whole call 10 s to answer, the body's
/// reading bounded by the invocation's time budget), and path-style addressing when the
/// configuration names an endpoint of its own (`AWS_ENDPOINT_URL`, `AWS_ENDPOINT_URL_S3`: a local S3 serves
/// `http://host/bucket/key`, not `http://bucket.host/key`).
#[cfg(feature = "s3")]
#[cfg_attr(docsrs, doc(cfg(feature = "s3")))]
pub fn s3_client(config: &aws_config::SdkConfig) -> aws_sdk_s3::Client {
    let config = aws_sdk_s3::config::Builder::from(config)
        .force_path_style(
            config.endpoint_url().is_some() || std::env::var_os("AWS_ENDPOINT_URL_S3").is_some(),
        )
        .retry_config(three_attempts())
        .timeout_config(bounded(5, 10))
        .build();
    aws_sdk_s3::Client::from_conf(config)
}

/// The retries of the SQS and S3 clients: standard mode, 3 attempts, 50 ms to 1 s apart.
#[cfg(any(feature = "sqs", feature = "s3"))]
fn three_attempts() -> aws_config::retry::RetryConfig {
    aws_config::retry::RetryConfig::standard()
        .with_max_attempts(3)
        .with_initial_backoff(std::time::Duration::from_millis(50))
        .with_max_backoff(std::time::Duration::from_secs(1))
}

/// The bounds of the SQS and S3 clients: 1 s to connect, `attempt_secs` an attempt,
/// `call_secs` the whole call (a silent endpoint must not hold a call until the deadline).
#[cfg(any(feature = "sqs", feature = "s3"))]
fn bounded(attempt_secs: u64, call_secs: u64) -> aws_config::timeout::TimeoutConfig {
    use std::time::Duration;
    aws_config::timeout::TimeoutConfig::builder()
        .connect_timeout(Duration::from_secs(1))
        .operation_attempt_timeout(Duration::from_secs(attempt_secs))
        .operation_timeout(Duration::from_secs(call_secs))
        .build()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_bundle_builds_a_client() {
        assert!(super::bundled().is_ok());
        assert!(!webpki_root_certs::TLS_SERVER_ROOT_CERTS.is_empty());
    }
}
