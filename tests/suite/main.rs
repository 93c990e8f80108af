//! The library's integration tests: one test binary, a module per area (`cargo test -p sqs-claim --test suite`); run one
//! area with its module's name as the filter, `cargo test -p sqs-claim --all-features --test suite
//! test_processor::`. A module that needs features is compiled only with them (`cargo test` with the
//! defaults builds what it can run). One binary links the dependency graph once, where a
//! binary per file linked it 37 times (docs/testing.md).

#[path = "../support/mod.rs"]
mod support;

mod test_boxed_store;
#[cfg(feature = "dynamodb")]
mod test_cached_store;
mod test_contention;
mod test_deadline;
mod test_debug;
#[cfg(feature = "dynamodb")]
mod test_dynamodb_store;
mod test_envelopes;
mod test_errors;
mod test_events;
#[cfg(feature = "sqs")]
mod test_failure_destination;
mod test_fault_proxy;
#[cfg(feature = "sqs")]
mod test_fifo_e2e;
mod test_fifo_processing;
#[cfg(feature = "apigw")]
mod test_idempotency;
#[cfg(all(feature = "apigw", feature = "sqlite"))]
mod test_idempotency_examples;
#[cfg(feature = "idempotency")]
mod test_idempotency_wait;
#[cfg(all(feature = "kafka-avro", feature = "kafka-protobuf"))]
mod test_kafka_schema;
mod test_lambda_run;
#[cfg(all(feature = "s3", feature = "sqs"))]
mod test_large_messages;
mod test_layers;
mod test_lease;
#[cfg(feature = "logging")]
mod test_logging;
mod test_memory_store;
mod test_metrics;
#[cfg(all(
    feature = "sqlite",
    feature = "dynamodb",
    feature = "redis",
    feature = "postgres"
))]
mod test_model;
mod test_one_shot;
#[cfg(all(feature = "postgres", feature = "admin"))]
mod test_postgres_store;
#[cfg(all(feature = "dynamodb", feature = "powertools", feature = "apigw"))]
mod test_powertools;
mod test_processor;
mod test_properties;
#[cfg(feature = "sqs")]
mod test_publish;
#[cfg(feature = "sqs")]
mod test_redelivery;
#[cfg(feature = "redis")]
mod test_redis_store;
mod test_spans;
#[cfg(feature = "sqlite")]
mod test_sqlite_store;
#[cfg(all(feature = "dynamodb", feature = "redis", feature = "postgres"))]
mod test_store_faults;
#[cfg(all(feature = "streams", feature = "dynamodb"))]
mod test_streams;
#[cfg(all(feature = "redis", feature = "postgres"))]
mod test_tiered_store;
