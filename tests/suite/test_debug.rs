//! `Debug` output never carries a body or a parameter value: `?msg` and `?effect` land in logs,
//! and the no-bodies-in-logs rule holds for them too.

use sqs_claim::Message;
use sqs_claim::events::SqsMessage;
use sqs_claim::store::MemoryEffect;

const SECRET: &str = "4111-1111-SECRET";

fn assert_clean(what: &str, debug: String) {
    assert!(!debug.contains(SECRET), "{what} leaked a secret: {debug}");
    assert!(
        !debug.contains("4111"),
        "{what} leaked part of a secret: {debug}"
    );
}

#[test]
fn message_debug_has_no_body() {
    let mut m = SqsMessage::default();
    m.message_id = Some("m-1".into());
    m.body = Some(format!(r#"{{"card":"{SECRET}"}}"#));
    let msg = Message::new(m, Some("ns#k".into()));
    let debug = format!("{msg:?}");
    assert!(debug.contains("m-1"), "{debug}");
    assert_clean("Message", debug);
    assert_clean("Message (pretty)", format!("{msg:#?}"));
}

#[test]
fn memory_effect_debug_has_no_data() {
    let secret = SECRET.to_owned();
    let effect = MemoryEffect::new(move || drop(secret.clone()));
    assert_clean("MemoryEffect", format!("{effect:?}"));
}

#[cfg(feature = "sqlite")]
#[test]
fn sql_effect_debug_has_the_statement_but_no_parameters() {
    use sqs_claim::{SqlEffect, SqlValue};
    let effect = SqlEffect::new(
        "UPDATE accounts SET card = ?1 WHERE account = ?2",
        vec![SECRET.into(), SqlValue::Blob(SECRET.as_bytes().to_vec())],
    )
    .expect_rows(1);
    let debug = format!("{effect:?}");
    assert!(debug.contains("UPDATE accounts"), "{debug}");
    assert_clean("SqlEffect", debug);
    let effects: sqs_claim::Effects<SqlEffect> = vec![effect].into();
    assert_clean("Effects<SqlEffect>", format!("{effects:#?}"));
}

#[cfg(feature = "postgres")]
#[test]
fn pg_effect_debug_has_the_statement_but_no_parameters() {
    use sqs_claim::store::postgres::PgEffect;
    let effect = PgEffect::new("UPDATE accounts SET card = $1")
        .bind(SECRET.to_owned())
        .expect_rows(1);
    let debug = format!("{effect:?}");
    assert!(debug.contains("UPDATE accounts"), "{debug}");
    assert_clean("PgEffect", debug);
}

#[cfg(feature = "redis")]
#[test]
fn redis_effect_debug_has_no_values() {
    use sqs_claim::RedisEffect;
    for effect in [
        RedisEffect::set("receipt:o-1", SECRET),
        RedisEffect::set_nx("receipt:o-1", SECRET),
        RedisEffect::hincr_by("balances", SECRET, 4111),
        RedisEffect::hincr_by_within("balances", SECRET, 4111, 0..=10_000),
        RedisEffect::incr_by("total", 4111),
    ] {
        let debug = format!("{effect:?}");
        assert!(debug.contains("RedisEffect"), "{debug}");
        assert_clean("RedisEffect", debug);
    }
}

#[cfg(feature = "sqs")]
#[test]
fn outgoing_debug_has_no_body_or_attribute_values() {
    use sqs_claim::publish::Outgoing;
    let out = Outgoing::new(format!(r#"{{"card":"{SECRET}"}}"#)).attribute("card", SECRET);
    let debug = format!("{out:?}");
    assert!(debug.contains("body_len"), "{debug}");
    assert_clean("Outgoing", debug);
}
