//! SQS bodies as AWS writes them when a queue is fed by another service: an SNS notification
//! (raw message delivery off), an EventBridge event, an S3 event notification, S3's test event.
//!
//! The shapes are AWS's documented ones (the SNS developer guide's "Fanout to Amazon SQS
//! queues" message, the EventBridge user guide's event structure, the S3 user guide's event
//! message structure, version 2.1), with every field they list, so a consumer that reads them
//! is tested against what AWS sends, not against a shape made up for the test.
//!
//! ```
//! use sqs_claim_testkit::envelope;
//! use sqs_claim_testkit::sqs::record;
//!
//! let body = envelope::sns_notification("63a3f6b6-d533-4a47-aef9-fcf5cf758c76", r#"{"order_id":"o-1"}"#);
//! let wrapped = record("m-1", &body);
//! let parsed: serde_json::Value = serde_json::from_str(wrapped.body()).unwrap();
//! assert_eq!(parsed["Message"], r#"{"order_id":"o-1"}"#);
//! ```

use serde_json::{Value, json};

/// The topic the SNS bodies come from.
pub const TOPIC_ARN: &str = "arn:aws:sns:us-west-2:123456789012:MyTopic";

/// An SNS notification of `message` (the published text, a JSON document as a string for a
/// JSON payload) published under `message_id`, as SNS delivers it to an SQS queue without raw
/// message delivery.
pub fn sns_notification(message_id: &str, message: &str) -> String {
    json!({
        "Type": "Notification",
        "MessageId": message_id,
        "TopicArn": TOPIC_ARN,
        "Subject": "Testing publish to subscribed queues",
        "Message": message,
        "Timestamp": "2012-03-29T05:12:16.901Z",
        "SignatureVersion": "1",
        "Signature": "EXAMPLEnTrFPa3...",
        "SigningCertURL": "https://sns.us-west-2.amazonaws.com/SimpleNotificationService-f3ecfb7224c7233fe7bb5f59f96de52f.pem",
        "UnsubscribeURL": "https://sns.us-west-2.amazonaws.com/?Action=Unsubscribe&SubscriptionArn=arn:aws:sns:us-west-2:123456789012:MyTopic:c7fe3a54-ab0e-4ec2-88e0-db410a0f2bee",
        "MessageAttributes": {
            "tenant": {"Type": "String", "Value": "acme"}
        }
    })
    .to_string()
}

/// The `SubscriptionConfirmation` SNS puts in a queue subscribed from another account: not a
/// notification, nothing to process.
pub fn sns_subscription_confirmation(message_id: &str) -> String {
    json!({
        "Type": "SubscriptionConfirmation",
        "MessageId": message_id,
        "Token": "2336412f37fb687f5d51e6e241d09c805a5a57b30d712f794cc5f6a988666d92768dd60a747ba6f3beb71854e285d6ad02428b09ceece29417f1f02d609c582afbacc99c583a916b9981dd2728f4ae6fdb82efd087cc3b7849e05798d2d2785c03b0879594eeac82c01f235d0e717736",
        "TopicArn": TOPIC_ARN,
        "Message": "You have chosen to subscribe to the topic arn:aws:sns:us-west-2:123456789012:MyTopic.\nTo confirm the subscription, visit the SubscribeURL included in this message.",
        "SubscribeURL": "https://sns.us-west-2.amazonaws.com/?Action=ConfirmSubscription&TopicArn=arn:aws:sns:us-west-2:123456789012:MyTopic&Token=2336412f37",
        "Timestamp": "2012-04-26T20:45:04.751Z",
        "SignatureVersion": "1",
        "Signature": "EXAMPLEpH+DcEwjAPg8O9mY8dReBSwksfg2S7WKQcikcNKWLQjwu6A4VbeS0QHVCkhRS7fUQvi2egU3N858fiTDN6bkkOxYDVrY0Ad8L10Hs3zH81mtnPk5uvvolIC1CXGu43obcgFxeL3khZl8IKvO61GWB6jI9b5+gLPoBc1Q=",
        "SigningCertURL": "https://sns.us-west-2.amazonaws.com/SimpleNotificationService-f3ecfb7224c7233fe7bb5f59f96de52f.pem"
    })
    .to_string()
}

/// An EventBridge event with this `id` and `detail`, as an EventBridge rule with an SQS target
/// puts it in the body (the fields of the EventBridge user guide's event structure).
pub fn eventbridge_event(id: &str, detail_type: &str, detail: &Value) -> String {
    json!({
        "version": "0",
        "id": id,
        "detail-type": detail_type,
        "source": "com.example.payments",
        "account": "111122223333",
        "time": "2017-12-22T18:43:48Z",
        "region": "us-west-1",
        "resources": [],
        "detail": detail
    })
    .to_string()
}

/// An S3 event notification (`ObjectCreated:Put`, structure version 2.1) of one object, as S3
/// sends it to an SQS queue: one record per message.
pub fn s3_notification(bucket: &str, key: &str, sequencer: &str) -> String {
    json!({"Records": [s3_record(bucket, key, sequencer)]}).to_string()
}

/// One record of an S3 event notification (see [`s3_notification`]).
pub fn s3_record(bucket: &str, key: &str, sequencer: &str) -> Value {
    json!({
        "eventVersion": "2.1",
        "eventSource": "aws:s3",
        "awsRegion": "us-west-2",
        "eventTime": "1970-01-01T00:00:00.000Z",
        "eventName": "ObjectCreated:Put",
        "userIdentity": {"principalId": "AIDAJDPLRKLG7UEXAMPLE"},
        "requestParameters": {"sourceIPAddress": "127.0.0.1"},
        "responseElements": {
            "x-amz-request-id": "C3D13FE58DE4C810",
            "x-amz-id-2": "FMyUVURIY8/IgAtTv8xRjskZQpcIZ9KG4V5Wp6S7S/JRWeUWerMUE5JgHvANOjpD"
        },
        "s3": {
            "s3SchemaVersion": "1.0",
            "configurationId": "testConfigRule",
            "bucket": {
                "name": bucket,
                "ownerIdentity": {"principalId": "A3NL1KOZZKExample"},
                "arn": format!("arn:aws:s3:::{bucket}")
            },
            "object": {
                "key": key,
                "size": 1024,
                "eTag": "d41d8cd98f00b204e9800998ecf8427e",
                "versionId": "096fKKXTRTtl3on89fVO.nfljtsv6qko",
                "sequencer": sequencer
            }
        }
    })
}

/// The `s3:TestEvent` S3 sends to a queue when its notifications are set up: no record.
pub fn s3_test_event(bucket: &str) -> String {
    json!({
        "Service": "Amazon S3",
        "Event": "s3:TestEvent",
        "Time": "2014-10-13T15:57:02.089Z",
        "Bucket": bucket,
        "RequestId": "5582815E1AEA5ADF",
        "HostId": "8cLeGAmw098X5cv4Zkwcmo8vvZa3eH3eKxsPzbB9wrR+YstdA6Knx4Ip8EXAMPLE"
    })
    .to_string()
}
