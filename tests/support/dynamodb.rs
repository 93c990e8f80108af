//! DynamoDB Local for the tests: its endpoint, a client with test credentials (both the test
//! kit's), a store on a fresh table.

pub(crate) use sqs_claim_testkit::local::{dynamodb_client, dynamodb_endpoint};

/// A DynamoDB store on a fresh table `{prefix}-<uuid>`, created on DynamoDB Local.
pub(crate) async fn dynamodb_store(prefix: &str) -> sqs_claim::DynamoDbStore {
    dynamodb_store_at(&dynamodb_endpoint(), prefix).await
}

/// A DynamoDB store on a fresh table `{prefix}-<uuid>`, created through `endpoint` (DynamoDB
/// Local, or a proxy in front of it such as the test kit's `ConflictProxy`).
pub(crate) async fn dynamodb_store_at(endpoint: &str, prefix: &str) -> sqs_claim::DynamoDbStore {
    let table = sqs_claim_testkit::local::unique_name(prefix);
    let store = sqs_claim::DynamoDbStore::new(dynamodb_client(endpoint), table);
    if let Err(e) = sqs_claim::store::StoreAdmin::init(&store).await {
        panic!(
            "cannot create a table on DynamoDB Local at {endpoint}: {e}\n\
             run `make test`, or `scripts/standins.sh up` first"
        );
    }
    store
}
