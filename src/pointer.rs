//! Reading one value at a JSON pointer without building the document.
//!
//! The key of a message is usually one field of its body (`/order_id`), and the handler parses
//! the same body again into its own type. Building a `serde_json::Value` of the whole body to
//! read one field allocates every string and map of it; this walks the pointer's path instead,
//! skipping everything else with [`IgnoredAny`] (which still checks that the skipped text is
//! JSON) and borrowing the value found as raw text. Only a value that is not a string (a
//! number, an object) is parsed into a `Value`, so that its text is exactly what
//! `Value::pointer(..).to_string()` gives: keys already stored keep matching.

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

/// The value at `pointer` (RFC 6901, starting with `/`, or empty for the whole text) in
/// `text`, which must be one JSON value as a whole, as `serde_json::from_str` requires.
pub(crate) fn find(text: &str, pointer: &str) -> Result<Found, serde_json::Error> {
    match find_raw(text, pointer)? {
        Some(raw) => leaf(raw),
        None => Ok(Found::Nothing),
    }
}

/// The raw JSON text of the value at `pointer` in `text` (`null` included), or `None` if
/// there is nothing there. The same walk as [`find`], for a caller that reads the value's
/// text itself (the `powertools` key keeps numbers exactly as written).
pub(crate) fn find_raw<'t>(
    text: &'t str,
    pointer: &str,
) -> Result<Option<&'t str>, serde_json::Error> {
    let tokens: Vec<String> = if pointer.is_empty() {
        Vec::new()
    } else {
        pointer
            .strip_prefix('/')
            .unwrap_or(pointer)
            .split('/')
            .map(|t| t.replace("~1", "/").replace("~0", "~"))
            .collect()
    };
    // The first step validates the whole text; later steps walk inside the raw value found,
    // which that first parse already checked.
    let mut raw: &RawValue = serde_json::from_str(text)?;
    for token in &tokens {
        let mut de = serde_json::Deserializer::from_str(raw.get());
        match de.deserialize_any(Step { token })? {
            Some(next) => raw = next,
            None => return Ok(None),
        }
    }
    Ok(Some(raw.get()))
}

/// The key text of the raw value at the end of the path.
fn leaf(raw: &str) -> Result<Found, serde_json::Error> {
    match raw.as_bytes().first() {
        Some(b'n') => Ok(Found::Nothing),
        Some(b'"') => {
            let s: std::borrow::Cow<'_, str> = serde_json::from_str(raw)?;
            Ok(if s.is_empty() {
                Found::Nothing
            } else {
                Found::Value(s.into_owned())
            })
        }
        // Numbers and containers: the text `Value` would print (normalised numbers, sorted
        // object keys), so a key taken from them is the same as before this reader existed.
        _ => Ok(Found::Value(
            serde_json::from_str::<serde_json::Value>(raw)?.to_string(),
        )),
    }
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
}
