//! events/streams/schemas/payments.proto's `Payment`, as `prost-build` would make it (written
//! out: the suite and the benchmark need no protoc), with `serde` derived for its JSON form.
//! Shared by tests/suite/test_kafka_schema.rs and benches/kafka_decode.rs (`#[path]`), so the
//! two cannot drift from the .proto apart.

/// The payment; `currency` is the `Currency` enum's number.
#[derive(Clone, PartialEq, prost::Message, serde::Serialize, serde::Deserialize)]
pub(crate) struct PbPayment {
    #[prost(string, tag = "1")]
    pub(crate) payment_id: String,
    #[prost(string, tag = "2")]
    pub(crate) account: String,
    #[prost(int64, tag = "3")]
    pub(crate) cents: i64,
    #[prost(int32, tag = "4")]
    pub(crate) currency: i32,
    #[prost(string, optional, tag = "5")]
    pub(crate) memo: Option<String>,
}
