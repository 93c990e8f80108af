//! A strict Avro binary decoder to JSON (feature `kafka-avro`): `apache-avro` parses the
//! writer schema; the datum is read here. `apache-avro`'s own reader takes the end of its input
//! inside a string, a boolean or a union's branch index for a `null` (its container reader
//! relies on it), so a truncated record would decode, with nulls where its last fields were.
//! This one fails it. It never quotes what it read, only where and why.

use std::collections::HashMap;

use apache_avro::Schema;
use apache_avro::schema::{InnerDecimalSchema, Name, ResolvedSchema, UuidSchema};
use serde_json::{Map, Value};

/// A writer schema, with its named types for references.
#[derive(Debug)]
pub(crate) struct Writer {
    schema: Schema,
    names: HashMap<Name, Schema>,
}

/// How deep records, arrays, maps, unions and references may nest in a datum.
const MAX_DEPTH: usize = 512;

impl Writer {
    pub(crate) fn new(schema: Schema) -> Result<Writer, String> {
        let names = ResolvedSchema::try_from(&schema)
            .map_err(|e| format!("its named types do not resolve: {e}"))?
            .get_names()
            .iter()
            .map(|(name, schema)| (name.clone(), (*schema).clone()))
            .collect();
        Ok(Writer { schema, names })
    }

    /// The datum `bytes` holds, all of it, as JSON; or why not.
    pub(crate) fn decode(&self, bytes: &[u8]) -> Result<Value, String> {
        let mut reader = Reader {
            bytes,
            at: 0,
            items: bytes.len() + ZERO_WIDTH_ITEMS,
        };
        let value = reader.value(&self.schema, None, &self.names, 0)?;
        if reader.at != bytes.len() {
            return Err(format!(
                "{} bytes are left after the datum",
                bytes.len() - reader.at
            ));
        }
        Ok(value)
    }
}

struct Reader<'b> {
    bytes: &'b [u8],
    at: usize,
    /// Array and map items the datum may still hold. Each item but a zero-width one (`null`,
    /// an empty record, `fixed(0)`) takes a byte at least; this bounds those, so a crafted
    /// record of a few bytes cannot claim millions of them.
    items: usize,
}

/// Zero-width items a datum may hold beyond one per byte.
const ZERO_WIDTH_ITEMS: usize = 10_000;

fn truncated() -> String {
    "ends before the datum does (truncated)".to_owned()
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        let end = self.at.checked_add(n).filter(|e| *e <= self.bytes.len());
        let end = end.ok_or_else(truncated)?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn long(&mut self) -> Result<i64, String> {
        let mut value: u64 = 0;
        for i in 0..10 {
            let byte = *self.take(1)?.first().ok_or_else(truncated)?;
            if i == 9 && byte > 1 {
                return Err("holds a varint past 64 bits".to_owned());
            }
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return Ok(((value >> 1) as i64) ^ -((value & 1) as i64));
            }
        }
        Err("holds a varint longer than 10 bytes".to_owned())
    }

    fn int(&mut self) -> Result<i32, String> {
        let long = self.long()?;
        i32::try_from(long).map_err(|_| "holds an int out of its range".to_owned())
    }

    fn len(&mut self, what: &str) -> Result<usize, String> {
        let n = self.long()?;
        usize::try_from(n)
            .ok()
            .filter(|n| *n <= self.bytes.len() - self.at)
            .ok_or_else(|| {
                format!("ends before the datum does (truncated: a {what} longer than what is left)")
            })
    }

    fn raw(&mut self) -> Result<&[u8], String> {
        let n = self.len("bytes or string")?;
        self.take(n)
    }

    /// A block count of an array or map, and its size in bytes when the writer gave it (a
    /// negative count is followed by the block's size).
    fn block(&mut self) -> Result<(usize, Option<usize>), String> {
        let n = self.long()?;
        let (n, size) = if n < 0 {
            let n = n.checked_neg().ok_or("holds a block count out of range")?;
            let size = usize::try_from(self.long()?)
                .ok()
                .filter(|size| *size <= self.bytes.len() - self.at)
                .ok_or_else(|| "holds a block size past its end".to_owned())?;
            (n, Some(size))
        } else {
            (n, None)
        };
        let n = usize::try_from(n)
            .ok()
            .filter(|n| *n <= self.items)
            .ok_or_else(|| "holds more items than its bytes can".to_owned())?;
        self.items -= n;
        Ok((n, size))
    }

    /// An array's or map's blocks, each item read by `item`, up to the empty block that
    /// ends them; a block's stated size (if the writer gave one) must be what its items took.
    fn blocks(
        &mut self,
        mut item: impl FnMut(&mut Self) -> Result<(), String>,
    ) -> Result<(), String> {
        loop {
            let (n, size) = self.block()?;
            if n == 0 {
                return Ok(());
            }
            let start = self.at;
            for _ in 0..n {
                item(self)?;
            }
            if size.is_some_and(|size| self.at - start != size) {
                return Err("holds a block whose items do not fill its stated size".to_owned());
            }
        }
    }

    fn value(
        &mut self,
        schema: &Schema,
        namespace: Option<&str>,
        names: &HashMap<Name, Schema>,
        depth: usize,
    ) -> Result<Value, String> {
        if depth > MAX_DEPTH {
            return Err(format!("nests deeper than {MAX_DEPTH} levels"));
        }
        Ok(match schema {
            Schema::Null => Value::Null,
            Schema::Boolean => match self.take(1)?[0] {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                _ => return Err("holds a boolean that is neither 0 nor 1".to_owned()),
            },
            Schema::Int | Schema::Date | Schema::TimeMillis => Value::from(self.int()?),
            Schema::Long
            | Schema::TimeMicros
            | Schema::TimestampMillis
            | Schema::TimestampMicros
            | Schema::TimestampNanos
            | Schema::LocalTimestampMillis
            | Schema::LocalTimestampMicros
            | Schema::LocalTimestampNanos => Value::from(self.long()?),
            Schema::Float => {
                let b = self.take(4)?;
                number(f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]])))?
            }
            Schema::Double => {
                let mut b = [0u8; 8];
                b.copy_from_slice(self.take(8)?);
                number(f64::from_le_bytes(b))?
            }
            Schema::Bytes => Value::Array(self.raw()?.iter().map(|b| Value::from(*b)).collect()),
            Schema::String | Schema::Uuid(UuidSchema::String) => {
                let raw = self.raw()?;
                Value::String(
                    std::str::from_utf8(raw)
                        .map_err(|_| "holds a string that is not UTF-8".to_owned())?
                        .to_owned(),
                )
            }
            Schema::Uuid(UuidSchema::Bytes) => {
                let raw = self.raw()?;
                uuid::Uuid::from_slice(raw)
                    .map(|u| Value::String(u.to_string()))
                    .map_err(|_| "holds a uuid that is not 16 bytes".to_owned())?
            }
            Schema::Uuid(UuidSchema::Fixed(fixed)) => {
                let raw = self.take(fixed.size)?;
                uuid::Uuid::from_slice(raw)
                    .map(|u| Value::String(u.to_string()))
                    .map_err(|_| "holds a uuid that is not 16 bytes".to_owned())?
            }
            Schema::Fixed(fixed) => Value::Array(
                self.take(fixed.size)?
                    .iter()
                    .map(|b| Value::from(*b))
                    .collect(),
            ),
            Schema::Duration(_) => {
                let b = self.take(12)?;
                let part = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
                serde_json::json!({"months": part(0), "days": part(4), "millis": part(8)})
            }
            Schema::Decimal(decimal) => {
                let raw = match &decimal.inner {
                    InnerDecimalSchema::Bytes => self.raw()?,
                    InnerDecimalSchema::Fixed(fixed) => self.take(fixed.size)?,
                };
                Value::String(decimal_text(raw, decimal.scale)?)
            }
            Schema::BigDecimal => {
                return Err("uses the big-decimal logical type, which is not read".to_owned());
            }
            Schema::Array(array) => {
                let mut items = Vec::new();
                self.blocks(|r| {
                    items.push(r.value(&array.items, namespace, names, depth + 1)?);
                    Ok(())
                })?;
                Value::Array(items)
            }
            Schema::Map(map) => {
                let mut items = Map::new();
                self.blocks(|r| {
                    let key = std::str::from_utf8(r.raw()?)
                        .map_err(|_| "holds a map key that is not UTF-8".to_owned())?
                        .to_owned();
                    let value = r.value(&map.types, namespace, names, depth + 1)?;
                    items.insert(key, value);
                    Ok(())
                })?;
                Value::Object(items)
            }
            Schema::Union(union) => {
                let index = self.long()?;
                let variant = usize::try_from(index)
                    .ok()
                    .and_then(|i| union.variants().get(i))
                    .ok_or_else(|| {
                        format!("names union branch {index} of {}", union.variants().len())
                    })?;
                self.value(variant, namespace, names, depth + 1)?
            }
            Schema::Record(record) => {
                let name = if record.name.namespace().is_some() {
                    std::borrow::Cow::Borrowed(&record.name)
                } else {
                    record.name.fully_qualified_name(namespace)
                };
                let inner = name.namespace();
                let mut fields = Map::new();
                for field in &record.fields {
                    let value = self.value(&field.schema, inner, names, depth + 1)?;
                    fields.insert(field.name.clone(), value);
                }
                Value::Object(fields)
            }
            Schema::Enum(e) => {
                let index = self.int()?;
                let symbol = usize::try_from(index)
                    .ok()
                    .and_then(|i| e.symbols.get(i))
                    .ok_or_else(|| {
                        format!(
                            "names an enum symbol its schema does not have (it has {})",
                            e.symbols.len()
                        )
                    })?;
                Value::String(symbol.clone())
            }
            Schema::Ref { name } => {
                // `apache-avro` stores names fully qualified as it parses; a name it left
                // without a namespace takes the enclosing one, as its own reader does.
                let (schema, name) = match names.get(name) {
                    Some(schema) => (schema, std::borrow::Cow::Borrowed(name)),
                    None => {
                        let qualified = name.fully_qualified_name(namespace);
                        let schema = names
                            .get(qualified.as_ref())
                            .ok_or_else(|| "names a type its schema does not define".to_owned())?;
                        (schema, qualified)
                    }
                };
                self.value(schema, name.namespace(), names, depth + 1)?
            }
        })
    }
}

fn number(f: f64) -> Result<Value, String> {
    serde_json::Number::from_f64(f)
        .map(Value::Number)
        .ok_or_else(|| "holds a NaN or infinite number, which JSON has no form for".to_owned())
}

/// A decimal's two's-complement big-endian unscaled value, with `scale` digits after the point,
/// as exact text (`"12.50"`).
fn decimal_text(raw: &[u8], scale: usize) -> Result<String, String> {
    if raw.len() > 16 {
        return Err("holds a decimal wider than 128 bits".to_owned());
    }
    let mut unscaled: i128 = if raw.first().is_some_and(|b| b & 0x80 != 0) {
        -1
    } else {
        0
    };
    for b in raw {
        unscaled = (unscaled << 8) | i128::from(*b);
    }
    let digits = unscaled.unsigned_abs().to_string();
    let sign = if unscaled < 0 { "-" } else { "" };
    if scale == 0 {
        return Ok(format!("{sign}{digits}"));
    }
    let digits = format!("{digits:0>width$}", width = scale + 1);
    let (whole, fraction) = digits.split_at(digits.len() - scale);
    Ok(format!("{sign}{whole}.{fraction}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writer(schema: &str) -> Writer {
        Writer::new(Schema::parse_str(schema).unwrap()).unwrap()
    }

    #[test]
    fn a_record_with_a_union_enum_array_map_and_reference_decodes() {
        let w = writer(
            r#"{"type":"record","name":"P","namespace":"x","fields":[
                {"name":"id","type":"string"},
                {"name":"memo","type":["null","string"]},
                {"name":"c","type":{"type":"enum","name":"C","symbols":["A","B"]}},
                {"name":"tags","type":{"type":"array","items":"string"}},
                {"name":"m","type":{"type":"map","values":"long"}},
                {"name":"again","type":"C"},
                {"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":2}}
            ]}"#,
        );
        // id "a", memo null, c B, tags ["t"], m {"k": -1}, again A, amount -1.25 (-125 = 0xff83)
        let bytes = [
            2, b'a', 0, 2, 2, 2, b't', 0, 2, 2, b'k', 1, 0, 0, 4, 0xff, 0x83,
        ];
        let v = w.decode(&bytes).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"id":"a","memo":null,"c":"B","tags":["t"],"m":{"k":-1},
                               "again":"A","amount":"-1.25"})
        );
        // Cut anywhere, it fails; never decodes to something else.
        for cut in 0..bytes.len() {
            assert!(w.decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        assert!(w.decode(&[bytes.as_slice(), &[0]].concat()).is_err());
    }

    #[test]
    fn a_truncated_optional_string_fails_where_apache_avro_reads_null() {
        let w = writer(
            r#"{"type":"record","name":"P","fields":[{"name":"id","type":"string"},
                {"name":"memo","type":["null","string"]}]}"#,
        );
        assert!(
            w.decode(&[2, b'a', 2, 6])
                .unwrap_err()
                .contains("truncated")
        );
        assert!(w.decode(&[2, b'a']).unwrap_err().contains("truncated"));
        assert_eq!(decimal_text(&[0x04, 0xe2], 2).unwrap(), "12.50");
        assert_eq!(decimal_text(&[0x05], 3).unwrap(), "0.005");
    }

    #[test]
    fn names_resolve_as_apache_avro_stores_them_across_namespaces() {
        // `Id` in `x` is 4 bytes; `Inner`, in `y`, has an `Id` of its own of 2 bytes, and its
        // field `again` names that one; `c`, back in `x`, names `x.Id`.
        let w = writer(
            r#"{"type":"record","name":"Outer","namespace":"x","fields":[
                {"name":"a","type":{"type":"fixed","name":"Id","size":4}},
                {"name":"inner","type":{"type":"record","name":"Inner","namespace":"y","fields":[
                    {"name":"b","type":{"type":"fixed","name":"Id","size":2}},
                    {"name":"again","type":"Id"}]}},
                {"name":"c","type":"Id"}]}"#,
        );
        let bytes = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12];
        assert_eq!(
            w.decode(&bytes).unwrap(),
            serde_json::json!({"a":[1,2,3,4],"inner":{"b":[5,6],"again":[7,8]},"c":[9,10,11,12]})
        );
    }

    #[test]
    fn numbers_fixed_uuid_duration_and_negative_block_counts_decode() {
        let w = writer(
            r#"{"type":"record","name":"N","fields":[
                {"name":"f","type":"float"},
                {"name":"d","type":"double"},
                {"name":"u","type":{"type":"string","logicalType":"uuid"}},
                {"name":"t","type":{"type":"fixed","name":"D","size":12,"logicalType":"duration"}},
                {"name":"xs","type":{"type":"array","items":"int"}}]}"#,
        );
        let uuid = "b7b4a7f0-9c2e-4c1a-8f3d-2a6c0e5d4f11";
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&1.5f32.to_le_bytes());
        bytes.extend_from_slice(&(-2.25f64).to_le_bytes());
        bytes.push(72); // 36, zig-zag
        bytes.extend_from_slice(uuid.as_bytes());
        bytes.extend_from_slice(&[1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0]);
        // A block of -2 items and 2 bytes: 1, -1; then the end.
        bytes.extend_from_slice(&[3, 4, 2, 1, 0]);
        assert_eq!(
            w.decode(&bytes).unwrap(),
            serde_json::json!({"f":1.5,"d":-2.25,"u":uuid,
                               "t":{"months":1,"days":2,"millis":3},"xs":[1,-1]})
        );
        // The block's stated size must be what its items take.
        let mut wrong = bytes.clone();
        let at = wrong.len() - 4;
        wrong[at] = 6; // 3 bytes
        assert!(w.decode(&wrong).is_err());
        let nan = [f32::NAN.to_le_bytes().as_slice(), &bytes[4..]].concat();
        assert!(w.decode(&nan).unwrap_err().contains("NaN"));
    }

    /// A few bytes claiming millions of zero-width items fail at once instead of allocating.
    #[test]
    fn zero_width_items_are_bounded() {
        let w = writer(r#"{"type":"array","items":"null"}"#);
        assert_eq!(
            w.decode(&[6, 0]).unwrap(),
            serde_json::json!([null, null, null])
        );
        // 1,000,000 nulls per block, many blocks.
        let mut bytes = Vec::new();
        for _ in 0..100 {
            bytes.extend_from_slice(&[0x80, 0x89, 0x7a]); // zig-zag varint of 1,000,000
        }
        bytes.push(0);
        assert!(w.decode(&bytes).unwrap_err().contains("more items"));
        let w = writer(r#"{"type":"record","name":"R","fields":[{"name":"s","type":"string"}]}"#);
        let why = w.decode(&[2, b'x', 0]).unwrap_err();
        assert!(why.contains("1 bytes are left"), "{why}");
        // A varint past 64 bits.
        let w = writer(r#""long""#);
        assert!(w.decode(&[0xff; 10]).unwrap_err().contains("64 bits"));
    }
}
