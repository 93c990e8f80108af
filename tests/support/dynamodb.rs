//! DynamoDB Local for the tests: its endpoint, a client with test credentials, a store on a
//! fresh table. Included with `#[path]`.
#![allow(dead_code)]

/// `SQS_CLAIM_DYNAMODB_ENDPOINT`, default the machine's DynamoDB Local.
pub(crate) fn dynamodb_endpoint() -> String {
    std::env::var("SQS_CLAIM_DYNAMODB_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:8000".into())
}

/// A DynamoDB client for `endpoint` (DynamoDB Local, or a proxy in front of it) with test
/// credentials and the SDK's default retry and timeout settings.
pub(crate) fn dynamodb_client(endpoint: &str) -> sqs_claim::aws_sdk_dynamodb::Client {
    use sqs_claim::aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
    let config = sqs_claim::aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "test"))
        .build();
    sqs_claim::aws_sdk_dynamodb::Client::from_conf(config)
}

/// A DynamoDB store on a fresh table `{prefix}-<uuid>`, created on DynamoDB Local.
pub(crate) async fn dynamodb_store(prefix: &str) -> sqs_claim::DynamoDbStore {
    let endpoint = dynamodb_endpoint();
    let table = format!("{prefix}-{}", uuid::Uuid::new_v4());
    let store = sqs_claim::DynamoDbStore::new(dynamodb_client(&endpoint), table);
    if let Err(e) = sqs_claim::store::StoreAdmin::init(&store).await {
        panic!(
            "cannot create a table on DynamoDB Local at {endpoint}: {e}\n\
             run `make test`, or `scripts/standins.sh up` first"
        );
    }
    store
}
