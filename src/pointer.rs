//! Reading one value at a JSON pointer without building the document.
//!
//! The key of a message is usually one field of its body (`/order_id`), and the handler parses
//! the same body again into its own type. Building a `serde_json::Value` of the whole body to
//! read one field allocates every string and map of it; this walks the pointer's path instead,
//! skipping everything else with [`IgnoredAny`] (which still checks that the skipped text is
//! JSON) and borrowing the value found as raw text. Only a value that is not a string (a
//! number, an object) is parsed into a `Value`, so that its text is exactly what
//! `Value::pointer(..).to_string()` gives: keys already stored keep matching. An integer too
//! large for 64 bits is the one exception: `Value` would round it through `f64` (two ids one
//! apart would share a key), so it is kept exactly as written.
//!
//! # A string that holds JSON: `~json`
//!
//! The token `~json` (not an RFC 6901 token: `~` may only be followed by `0` or `1` there)
//! descends into a string that holds a JSON document, as SNS's `Message` does:
//! `/Message/~json/order_id` reads `order_id` of the JSON inside the `Message` string. The
//! string is unescaped once (borrowed when it has no escapes) and the rest of the pointer walks
//! its text the same way, raw, so numbers in it stay exact. `null` at `~json` is nothing; any
//! other value that is not a string, or a string that is not JSON, is an error.
use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

/// What a pointer finds in a JSON text.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Found {
    /// Nothing at the pointer, or `null`.
    Nothing,
    /// The value's key text: a string as is, anything else as its compact JSON text.
    Value(String),
}

/// The token that descends into a string holding JSON (see the module docs).
pub(crate) const DESCEND: &str = "~json";

/// The value at `pointer` (RFC 6901, starting with `/`, or empty for the whole text; `~json`
/// descends into a string holding JSON) in `text`, which must be one JSON value as a whole, as
/// `serde_json::from_str` requires.
pub(crate) fn find(text: &str, pointer: &str) -> Result<Found, serde_json::Error> {
    match find_raw(text, pointer)? {
        Some(raw) => leaf(&raw),
        None => Ok(Found::Nothing),
    }
}

/// The raw JSON text of the value at `pointer` in `text` (`null` included), or `None` if
/// there is nothing there. The same walk as [`find`], for a caller that reads the value's
/// text itself (the `powertools` key keeps numbers exactly as written). Borrowed from `text`
/// unless the pointer descends into a string with escapes (`~json`): then the text of the
/// value found is copied out of the unescaped document.
pub(crate) fn find_raw<'t>(
    text: &'t str,
    pointer: &str,
) -> Result<Option<Cow<'t, str>>, serde_json::Error> {
    // "" is the whole text: no token at all (not one empty token, which names the member "").
    let path = (!pointer.is_empty()).then(|| pointer.strip_prefix('/').unwrap_or(pointer));
    walk(text, &mut path.into_iter().flat_map(|p| p.split('/')))
}

/// Walks `tokens` in the document `text`, descending into inner documents at `~json`.
fn walk<'t, 'p>(
    text: &'t str,
    tokens: &mut impl Iterator<Item = &'p str>,
) -> Result<Option<Cow<'t, str>>, serde_json::Error> {
    // The first step validates the whole text; later steps walk inside the raw value found,
    // which that first parse already checked.
    let mut raw: &RawValue = serde_json::from_str(text)?;
    while let Some(token) = tokens.next() {
        if token == DESCEND {
            return Ok(match string_contents(raw.get())? {
                None => None,
                Some(Cow::Borrowed(inner)) => walk(inner, tokens)?,
                Some(Cow::Owned(inner)) => {
                    walk(&inner, tokens)?.map(|v| Cow::Owned(v.into_owned()))
                }
            });
        }
        let token = unescape(token);
        let mut de = serde_json::Deserializer::from_str(raw.get());
        match de.deserialize_any(Step { token: &token })? {
            Some(next) => raw = next,
            None => return Ok(None),
        }
    }
    Ok(Some(Cow::Borrowed(raw.get())))
}

/// An RFC 6901 token's name: `~1` is `/`, `~0` is `~`.
fn unescape(token: &str) -> Cow<'_, str> {
    if token.contains('~') {
        Cow::Owned(token.replace("~1", "/").replace("~0", "~"))
    } else {
        Cow::Borrowed(token)
    }
}

/// The contents of the raw JSON string `raw` (already validated), for `~json`: borrowed when it
/// has no escapes. `None` for `null`; an error for any other value.
pub(crate) fn string_contents(raw: &str) -> Result<Option<Cow<'_, str>>, serde_json::Error> {
    match raw.as_bytes().first() {
        Some(b'n') => Ok(None),
        Some(b'"') => {
            let inner = &raw[1..raw.len() - 1];
            Ok(Some(if inner.contains('\\') {
                Cow::Owned(serde_json::from_str::<String>(raw)?)
            } else {
                Cow::Borrowed(inner)
            }))
        }
        _ => Err(de::Error::custom(
            "~json reads a string holding JSON, and the value there is not a string",
        )),
    }
}

/// The key text of the raw value at the end of the path.
fn leaf(raw: &str) -> Result<Found, serde_json::Error> {
    match raw.as_bytes().first() {
        Some(b'n') => Ok(Found::Nothing),
        Some(b'"') => {
            let s: Cow<'_, str> = serde_json::from_str(raw)?;
            Ok(if s.is_empty() {
                Found::Nothing
            } else {
                Found::Value(s.into_owned())
            })
        }
        // An integer beyond 64 bits: `Value` holds it as an `f64` (rounded), so it is kept as
        // written. (`-0`, which `Value` also reads as a float, is short and keeps its text.)
        _ if is_big_integer(raw) => Ok(Found::Value(raw.to_owned())),
        // Numbers and containers: the text `Value` would print (normalised numbers, sorted
        // object keys), so a key taken from them is the same as before this reader existed.
        _ => Ok(Found::Value(
            serde_json::from_str::<serde_json::Value>(raw)?.to_string(),
        )),
    }
}

/// Whether `raw` (a validated JSON value) is an integer that does not fit in `i64` or `u64`.
fn is_big_integer(raw: &str) -> bool {
    let digits = raw.strip_prefix('-').unwrap_or(raw);
    !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && raw.parse::<i64>().is_err()
        && raw.parse::<u64>().is_err()
}

/// One step down the path: the member or element named by `token`, as raw text.
struct Step<'t> {
    token: &'t str,
}

impl<'de> Visitor<'de> for Step<'_> {
    type Value = Option<&'de RawValue>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        // Duplicate names: the last one wins, as in `serde_json::Value`.
        let mut found = None;
        while let Some(name) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if name == self.token {
                found = Some(map.next_value::<&'de RawValue>()?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let wanted = index(self.token);
        let mut found = None;
        let mut i = 0usize;
        loop {
            if Some(i) == wanted {
                match seq.next_element::<&'de RawValue>()? {
                    Some(v) => found = Some(v),
                    None => break,
                }
            } else if seq.next_element::<IgnoredAny>()?.is_none() {
                break;
            }
            i += 1;
        }
        Ok(found)
    }

    // Scalars have no members: nothing at the pointer.
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

impl<'de> DeserializeSeed<'de> for Step<'_> {
    type Value = Option<&'de RawValue>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

/// An array index as RFC 6901 (and `serde_json`'s pointer) reads it: digits, no leading zero.
fn index(token: &str) -> Option<usize> {
    if token.starts_with('+') || (token.starts_with('0') && token.len() != 1) {
        return None;
    }
    token.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `serde_json::Value::pointer` says, in the same terms.
    fn reference(text: &str, pointer: &str) -> Option<Found> {
        let v: serde_json::Value = serde_json::from_str(text).ok()?;
        Some(match v.pointer(pointer) {
            None | Some(serde_json::Value::Null) => Found::Nothing,
            Some(serde_json::Value::String(s)) if s.is_empty() => Found::Nothing,
            Some(serde_json::Value::String(s)) => Found::Value(s.clone()),
            Some(other) => Found::Value(other.to_string()),
        })
    }

    #[test]
    fn agrees_with_value_pointer() {
        let texts = [
            r#"{"order_id":"o-1","amount":5}"#,
            r#"{"order_id":42}"#,
            r#"{"order_id":1.0}"#,
            r#"{"order_id":1e2}"#,
            r#"{"order_id":-0}"#,
            r#"{"order_id":null}"#,
            r#"{"order_id":""}"#,
            r#"{"order_id":"a\"b\u00e9\ud83d\ude00"}"#,
            r#"{"order_id":{"b":1,"a":[1,2]}}"#,
            r#"{"order_id":"first","order_id":"second"}"#,
            r#"{"a":{"b":[{"c":"deep"},{"c":"x"}]}}"#,
            r#"{"a/b":"slash","m~n":"tilde"}"#,
            r#"[10,20,30]"#,
            r#""just a string""#,
            r#"17"#,
            r#"{"order_id":true}"#,
            r#"{"": "empty name"}"#,
        ];
        let pointers = [
            "",
            "/order_id",
            "/a/b/0/c",
            "/a/b/1/c",
            "/a/b/01/c",
            "/a/b/2",
            "/a~1b",
            "/m~0n",
            "/0",
            "/2",
            "/3",
            "/-",
            "/",
            "/order_id/x",
            "/a/b/+1/c",
        ];
        for t in texts {
            for p in pointers {
                assert_eq!(find(t, p).ok(), reference(t, p), "{t} at {p:?}");
            }
        }
    }

    #[test]
    fn malformed_text_is_an_error() {
        for t in [
            "",
            "not json",
            r#"{"order_id":"o-1"} trailing"#,
            r#"{"order_id":"o-1""#,
            r#"{"a":[1,2,}"#,
            r#"{"other":tru,"order_id":"o-1"}"#,
        ] {
            assert!(find(t, "/order_id").is_err(), "{t}");
            assert!(reference(t, "/order_id").is_none(), "{t}");
        }
    }

    #[test]
    fn json_in_a_string_is_walked_into() {
        // SNS's envelope: the published JSON is the text of the `Message` string.
        let sns = r#"{"Type":"Notification","MessageId":"m-1","Message":"{\"order_id\":\"o-1\",\"n\":{\"id\":123456789012345678901234567890}}"}"#;
        assert_eq!(
            find(sns, "/Message/~json/order_id").unwrap(),
            Found::Value("o-1".into())
        );
        // Exact: `Value` would say 1.2345678901234568e29.
        assert_eq!(
            find(sns, "/Message/~json/n/id").unwrap(),
            Found::Value("123456789012345678901234567890".into())
        );
        assert_eq!(
            find_raw(sns, "/Message/~json/n").unwrap().as_deref(),
            Some(r#"{"id":123456789012345678901234567890}"#)
        );
        assert_eq!(find(sns, "/Message/~json/missing").unwrap(), Found::Nothing);
        assert_eq!(
            find(sns, "/Nothing/~json/order_id").unwrap(),
            Found::Nothing
        );
        // Without `~json`, the string has no members.
        assert_eq!(find(sns, "/Message/order_id").unwrap(), Found::Nothing);
        // Twice: a JSON string inside a JSON string (S3 → SNS → SQS).
        let twice =
            serde_json::json!({"Message": serde_json::json!({"inner": "{\"k\":7}"}).to_string()})
                .to_string();
        assert_eq!(
            find(&twice, "/Message/~json/inner/~json/k").unwrap(),
            Found::Value("7".into())
        );
    }

    #[test]
    fn json_in_a_string_without_escapes_is_borrowed() {
        let text = r#"{"m":"[1,2,3]"}"#;
        let found = find_raw(text, "/m/~json/1").unwrap();
        assert!(matches!(found, Some(Cow::Borrowed("2"))), "{found:?}");
    }

    #[test]
    fn descending_into_what_is_not_json_text_is_an_error() {
        assert_eq!(find(r#"{"m":null}"#, "/m/~json/a").unwrap(), Found::Nothing);
        for (text, pointer) in [
            (r#"{"m":{"a":1}}"#, "/m/~json/a"),
            (r#"{"m":17}"#, "/m/~json/a"),
            (r#"{"m":"not json {secret}"}"#, "/m/~json/a"),
            (r#"{"m":"{\"a\":1} trailing"}"#, "/m/~json/a"),
        ] {
            let err = find(text, pointer).unwrap_err();
            assert!(!err.to_string().contains("secret"), "{err}");
        }
    }

    #[test]
    fn big_integers_are_kept_as_written() {
        for (text, key) in [
            (r#"{"id":18446744073709551615}"#, "18446744073709551615"),
            (r#"{"id":18446744073709551616}"#, "18446744073709551616"),
            (r#"{"id":-9223372036854775808}"#, "-9223372036854775808"),
            (r#"{"id":-9223372036854775809}"#, "-9223372036854775809"),
            (r#"{"id":-0}"#, "-0.0"),
            (r#"{"id":1e400}"#, "1e400"),
        ] {
            match find(text, "/id") {
                Ok(Found::Value(v)) => assert_eq!(v, key, "{text}"),
                // 1e400 is out of f64's range: serde_json refuses it, as before.
                other => assert!(text.contains("1e400"), "{text}: {other:?}"),
            }
        }
        // Two ids one apart are two keys (through `Value` they were one).
        assert_ne!(
            find(r#"{"id":123456789012345678901}"#, "/id").unwrap(),
            find(r#"{"id":123456789012345678902}"#, "/id").unwrap()
        );
    }
}
