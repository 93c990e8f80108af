//! Kafka values and keys as producers encode them (feature `kafka-schema`; Avro with
//! `kafka-avro`, Protobuf with `kafka-protobuf`): JSON, Avro or Protobuf, plain or framed by a
//! schema registry's serializer (Confluent's, AWS Glue Schema Registry's), or already decoded
//! by the event source mapping's own schema registry integration.
//!
//! A [`Decoder`] says how one part of a record (its value, or its key) is encoded; give it to a
//! Kafka consumer with [`Kafka::value`](super::Kafka::value) and
//! [`Kafka::key`](super::Kafka::key). The consumer decodes each record before anything else
//! reads it and hands the handler the decoded part **as JSON text**: [`Message::body`] for the
//! value (so [`Message::json`] gives the team's `serde` type,
//! [`KeySource::JsonPointer`](crate::KeySource::JsonPointer) points into the decoded value and
//! the payload check fingerprints it), the `Key` attribute for the key.
//!
//! A record that does not decode fails alone, permanently, with a reason naming its topic,
//! partition, offset, the part (key, value, header) and why, never its bytes; as its
//! partition's first failure it stops its partition, like any failed Kafka record.
//!
//! ```
//! # #[cfg(feature = "kafka-avro")]
//! # fn main() -> Result<(), sqs_claim::Error> {
//! use sqs_claim::stream::schema::{Decoder, Framing};
//!
//! // Avro written by Confluent's serializer (magic byte 0, a 4-byte schema id), under the
//! // writer schema the team registered as id 7.
//! let schema = r#"{"type": "record", "name": "Payment", "fields": [
//!     {"name": "payment_id", "type": "string"}, {"name": "cents", "type": "long"}]}"#;
//! let value = Decoder::avro(schema)?.framing(Framing::Confluent).schema_ids([7]);
//! # let _ = value;
//! # Ok(()) }
//! # #[cfg(not(feature = "kafka-avro"))]
//! # fn main() {}
//! ```
//!
//! [`Message::body`]: crate::Message::body
//! [`Message::json`]: crate::Message::json

use std::io::Read as _;
#[cfg(any(feature = "kafka-avro", feature = "kafka-protobuf"))]
use std::sync::Arc;

use serde_json::Value;

use crate::{Error, ErrorKind};

/// The most bytes a compressed (zlib) Glue record may inflate to: a record larger than this
/// fails, so a crafted record cannot exhaust the function's memory.
const MAX_INFLATED: u64 = 16 * 1024 * 1024;

/// How one part of a Kafka record (its value, or its key) is encoded, and framed. See the
/// [module docs](self).
///
/// Its `Debug` names the format and framing, never a schema's text.
#[derive(Clone)]
pub struct Decoder {
    format: Format,
    framing: Framing,
    schema_ids: Option<Vec<u32>>,
    schema_versions: Option<Vec<[u8; 16]>>,
}

#[derive(Clone)]
enum Format {
    Json,
    #[cfg(feature = "kafka-avro")]
    Avro(Arc<super::avro::Writer>),
    #[cfg(feature = "kafka-protobuf")]
    Protobuf {
        type_name: &'static str,
        decode: ProtobufFn,
    },
}

#[cfg(feature = "kafka-protobuf")]
type ProtobufFn = Arc<dyn Fn(&[u8]) -> Result<String, String> + Send + Sync>;

/// How a schema registry's serializer framed a part's bytes ([`Decoder::framing`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Framing {
    /// The default: told apart by the first byte. `0` is Confluent's framing, `3` Glue's;
    /// anything else is plain bytes for JSON and Protobuf,
    /// whose first byte is never `0` or `3`. For Avro, whose plain bytes may begin with either,
    /// a part framed by neither fails: plain Avro needs [`Framing::Plain`].
    #[default]
    Auto,
    /// The encoding's bytes alone, as a producer without a schema registry writes them, and as
    /// the event source mapping's schema registry integration hands them over with
    /// `EventRecordFormat: SOURCE` (it removes the framing).
    Plain,
    /// Confluent Schema Registry's wire format: magic byte `0`, the schema id (4 bytes,
    /// big-endian), for Protobuf the message-index list (zig-zag varints; a single `0` for the
    /// file's first message), then the encoding's bytes.
    Confluent,
    /// AWS Glue Schema Registry's wire format: header version byte `3`, compression byte (`0`
    /// none, `5` zlib), the schema version's UUID (16 bytes), then the encoding's bytes,
    /// zlib-compressed when the compression byte says so.
    Glue,
}

impl std::fmt::Debug for Decoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decoder")
            .field("format", &self.format_name())
            .field("framing", &self.framing)
            .field("schema_ids", &self.schema_ids)
            .field(
                "schema_versions",
                &self.schema_versions.as_ref().map(|v| {
                    v.iter()
                        .map(|u| uuid::Uuid::from_bytes(*u))
                        .collect::<Vec<_>>()
                }),
            )
            .finish()
    }
}

impl Decoder {
    fn of(format: Format) -> Decoder {
        Decoder {
            format,
            framing: Framing::Auto,
            schema_ids: None,
            schema_versions: None,
        }
    }

    /// JSON (UTF-8), plain or framed (Confluent's JSON Schema serializer, Glue's JSON):
    /// checked to be JSON, handed over as its text.
    pub fn json() -> Decoder {
        Decoder::of(Format::Json)
    }

    /// Avro binary under the team's **writer schema** (its JSON text, as registered): the
    /// datum is decoded with it and handed over as JSON (a record as an object, a union as its
    /// branch's value, an enum as its symbol, `bytes` and `fixed` as lists of numbers, a
    /// `decimal` as exact text (`"12.50"`), a `uuid` as its text, a `duration` as `{"months",
    /// "days", "millis"}`, dates, times and timestamps as their numbers), so
    /// [`Message::json`](crate::Message::json) gives a `serde` type of the same shape. Not
    /// read (the record fails, saying so): `big-decimal`, a decimal wider than 16 bytes, a NaN
    /// or infinite `float` or `double` (JSON has no form for them).
    ///
    /// The reader is strict: a datum that ends early, or leaves bytes after it, fails.
    ///
    /// Fails with [`ErrorKind::Config`] when the schema does not parse.
    #[cfg(feature = "kafka-avro")]
    pub fn avro(writer_schema: &str) -> Result<Decoder, Error> {
        let schema = apache_avro::Schema::parse_str(writer_schema).map_err(|e| {
            Error::new(
                ErrorKind::Config,
                format!("the Avro writer schema does not parse: {e}"),
            )
        })?;
        let writer = super::avro::Writer::new(schema).map_err(|why| {
            Error::new(
                ErrorKind::Config,
                format!("the Avro writer schema does not parse: {why}"),
            )
        })?;
        Ok(Decoder::of(Format::Avro(Arc::new(writer))))
    }

    /// Protobuf of the team's message type `M` (a `prost` message, generated by `prost-build`
    /// or derived), decoded with `prost` and handed over as `M`'s `serde` JSON, so
    /// [`Message::json::<M>`](crate::Message::json) gives it back typed (derive
    /// `serde::Serialize` and `Deserialize` on it: `prost-build`'s
    /// `type_attribute(".", "#[derive(serde::Serialize, serde::Deserialize)]")`).
    ///
    /// Under Confluent's framing the message-index list is read and skipped: the part is
    /// decoded as `M` whichever message of its file it names.
    #[cfg(feature = "kafka-protobuf")]
    pub fn protobuf<M>() -> Decoder
    where
        M: prost::Message + Default + serde::Serialize + 'static,
    {
        let decode: ProtobufFn = Arc::new(|bytes: &[u8]| {
            let message = M::decode(bytes).map_err(|e| format!("is not Protobuf of it: {e}"))?;
            serde_json::to_string(&message)
                .map_err(|e| format!("decoded, but has no JSON form: {e}"))
        });
        Decoder::of(Format::Protobuf {
            type_name: std::any::type_name::<M>(),
            decode,
        })
    }

    /// How the part is framed (default [`Framing::Auto`]).
    pub fn framing(mut self, framing: Framing) -> Decoder {
        self.framing = framing;
        self
    }

    /// The Confluent schema ids this decoder's schema answers for. Once given (with or
    /// without [`schema_versions`](Self::schema_versions)), a part is taken only when it names
    /// one of them (Confluent's framing, or the `schemaId` of the mapping's registry metadata)
    /// or one of the versions: a part under another id, a Glue part under another version and
    /// a plain part (which names none) fail. Without either, any id is taken.
    pub fn schema_ids(mut self, ids: impl IntoIterator<Item = u32>) -> Decoder {
        self.schema_ids = Some(ids.into_iter().collect());
        self
    }

    /// The Glue schema version ids (UUIDs, as the registry shows them) this decoder's schema
    /// answers for, taken as [`schema_ids`](Self::schema_ids) are: once given, a part must
    /// name one of them (or one of the ids).
    ///
    /// Fails with [`ErrorKind::Config`] when one is not a UUID.
    pub fn schema_versions<'a>(
        mut self,
        versions: impl IntoIterator<Item = &'a str>,
    ) -> Result<Decoder, Error> {
        let parsed = versions
            .into_iter()
            .map(|v| {
                uuid::Uuid::parse_str(v)
                    .map(|u| *u.as_bytes())
                    .map_err(|_| {
                        Error::new(
                            ErrorKind::Config,
                            format!("the Glue schema version id {v:?} is not a UUID"),
                        )
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.schema_versions = Some(parsed);
        Ok(self)
    }

    /// The format's name (`JSON`, `Avro`, the Protobuf message's type), for reasons.
    pub(crate) fn format_name(&self) -> &'static str {
        match &self.format {
            Format::Json => "JSON",
            #[cfg(feature = "kafka-avro")]
            Format::Avro(_) => "Avro",
            #[cfg(feature = "kafka-protobuf")]
            Format::Protobuf { type_name, .. } => type_name,
        }
    }

    /// The part's bytes decoded to JSON text; or why not (never quoting the bytes).
    /// `registry` is the record's `valueSchemaMetadata` / `keySchemaMetadata`: present when
    /// the event source mapping's schema registry integration already took the framing off
    /// (`EventRecordFormat: SOURCE`) or decoded the part to JSON (`JSON`).
    pub(crate) fn decode(&self, bytes: &[u8], registry: Option<&Value>) -> Result<String, String> {
        if let Some(registry) = registry {
            return self.decode_registered(bytes, registry);
        }
        let framing = match self.framing {
            Framing::Auto => match bytes {
                [0, ..] => Framing::Confluent,
                [3, ..] => Framing::Glue,
                _ if self.plain_is_unambiguous() => Framing::Plain,
                _ => {
                    return Err(format!(
                        "has neither Confluent framing (first byte 0) nor Glue framing (first \
                         byte 3); plain {} needs Framing::Plain",
                        self.format_name()
                    ));
                }
            },
            other => other,
        };
        match framing {
            Framing::Auto | Framing::Plain => {
                if self.schema_ids.is_some() || self.schema_versions.is_some() {
                    return Err(
                        "carries no schema id (plain), and this consumer takes only the ids it \
                         was given"
                            .to_owned(),
                    );
                }
                self.decode_plain(bytes)
            }
            Framing::Confluent => {
                let Some((&[0, a, b, c, d], rest)) = bytes.split_first_chunk::<5>() else {
                    return Err(if bytes.len() < 5 {
                        format!(
                            "is too short for Confluent framing ({} bytes; magic byte and \
                             schema id take 5)",
                            bytes.len()
                        )
                    } else {
                        format!("has no Confluent framing (magic byte {}, not 0)", bytes[0])
                    });
                };
                let id = u32::from_be_bytes([a, b, c, d]);
                self.check_id(Some(id), None)?;
                self.decode_confluent(rest)
                    .map_err(|why| format!("under Confluent schema id {id} {why}"))
            }
            Framing::Glue => {
                if bytes.len() < 18 {
                    return Err(format!(
                        "is too short for Glue framing ({} bytes; the header takes 18)",
                        bytes.len()
                    ));
                }
                if bytes[0] != 3 {
                    return Err(format!(
                        "has no Glue framing (header version byte {}, not 3)",
                        bytes[0]
                    ));
                }
                let mut version = [0u8; 16];
                version.copy_from_slice(&bytes[2..18]);
                let named = uuid::Uuid::from_bytes(version);
                self.check_id(None, Some(version))?;
                let data = &bytes[18..];
                let inflated;
                let data = match bytes[1] {
                    0 => data,
                    5 => {
                        inflated = inflate(data)?;
                        &inflated[..]
                    }
                    other => {
                        return Err(format!(
                            "has Glue compression byte {other}, which is neither 0 (none) nor 5 \
                             (zlib)"
                        ));
                    }
                };
                self.skip_glue_message_index(data)
                    .and_then(|data| self.decode_plain(data))
                    .map_err(|why| format!("under Glue schema version {named} {why}"))
            }
        }
    }

    /// Whether a part written under the Confluent schema id `id` or the Glue schema version
    /// `version` is one this decoder takes: any, unless [`schema_ids`](Self::schema_ids) or
    /// [`schema_versions`](Self::schema_versions) were given; then only those (a Glue part
    /// when only ids were given, or the reverse, is not taken).
    fn check_id(&self, id: Option<u32>, version: Option<[u8; 16]>) -> Result<(), String> {
        if self.schema_ids.is_none() && self.schema_versions.is_none() {
            return Ok(());
        }
        let known_id =
            id.is_some_and(|id| self.schema_ids.as_ref().is_some_and(|i| i.contains(&id)));
        let known_version = version.is_some_and(|v| {
            self.schema_versions
                .as_ref()
                .is_some_and(|vs| vs.contains(&v))
        });
        if known_id || known_version {
            return Ok(());
        }
        Err(match (id, version) {
            (Some(id), _) => format!(
                "names unknown schema id {id} (this consumer's schema answers for {:?})",
                self.schema_ids.as_deref().unwrap_or_default()
            ),
            (_, Some(v)) => format!(
                "names unknown Glue schema version {}",
                uuid::Uuid::from_bytes(v)
            ),
            (None, None) => "carries no schema id this consumer can check".to_owned(),
        })
    }

    /// A part the event source mapping's schema registry integration validated (it carries
    /// `valueSchemaMetadata` / `keySchemaMetadata`): its framing is off. With
    /// `EventRecordFormat: SOURCE` it is the plain encoding; with `JSON` the mapping decoded it
    /// to JSON. Read both ways: what reads only one way is that; what reads both ways (an Avro
    /// datum whose bytes happen to be JSON) fails rather than be guessed. The metadata's
    /// `schemaId` is checked like a framed part's id.
    fn decode_registered(&self, bytes: &[u8], registry: &Value) -> Result<String, String> {
        if self.schema_ids.is_some() || self.schema_versions.is_some() {
            let named = registry.get("schemaId").and_then(|id| match id {
                Value::String(s) => Some(s.clone()),
                Value::Number(n) => Some(n.to_string()),
                _ => None,
            });
            let id = named.as_deref().and_then(|s| s.parse::<u32>().ok());
            let version = named
                .as_deref()
                .and_then(|s| uuid::Uuid::parse_str(s).ok())
                .map(|u| *u.as_bytes());
            self.check_id(id, version)
                .map_err(|why| format!("(validated by the mapping's schema registry) {why}"))?;
        }
        let plain = self.decode_plain(bytes);
        if matches!(self.format, Format::Json) {
            return plain;
        }
        match (plain, json_text(bytes)) {
            (Ok(decoded), Err(_)) => Ok(decoded),
            (Err(_), Ok(json)) => Ok(json),
            (Ok(_), Ok(_)) => Err(format!(
                "reads both as JSON (the mapping's EventRecordFormat JSON) and as {} \
                 (SOURCE): it is not guessed; give this part Decoder::json() if the mapping \
                 sends JSON",
                self.format_name()
            )),
            (Err(why), Err(_)) => Err(why),
        }
    }

    /// Whether plain bytes of this format are told from framed ones by their first byte.
    fn plain_is_unambiguous(&self) -> bool {
        match &self.format {
            Format::Json => true,
            #[cfg(feature = "kafka-avro")]
            Format::Avro(_) => false,
            // A Protobuf message's first byte is a field tag: never field 0.
            #[cfg(feature = "kafka-protobuf")]
            Format::Protobuf { .. } => true,
        }
    }

    /// The bytes after Confluent's schema id. For Protobuf, the message-index list comes
    /// first: a count, then as many indexes, as zig-zag varints (a count of 0 is the file's
    /// first message). Confluent's deprecated format (unsigned varints, gone from its current
    /// serializers) is not read: for any message but a file's first it fails, loudly. Other
    /// formats have no list.
    fn decode_confluent(&self, bytes: &[u8]) -> Result<String, String> {
        #[cfg(feature = "kafka-protobuf")]
        if let Format::Protobuf { .. } = &self.format {
            let rest = skip_message_indexes(bytes).ok_or_else(|| {
                "has a Confluent message-index list that does not read".to_owned()
            })?;
            return self.decode_plain(rest);
        }
        self.decode_plain(bytes)
    }

    /// The bytes after Glue's header (inflated). AWS's Glue Protobuf serializer puts the
    /// message's index in its file (an unsigned varint) before the message; other formats have
    /// none.
    fn skip_glue_message_index<'b>(&self, bytes: &'b [u8]) -> Result<&'b [u8], String> {
        #[cfg(feature = "kafka-protobuf")]
        if let Format::Protobuf { .. } = &self.format {
            return varint(bytes)
                .map(|(_, rest)| rest)
                .ok_or_else(|| "has a Glue message index that does not read".to_owned());
        }
        Ok(bytes)
    }

    fn decode_plain(&self, bytes: &[u8]) -> Result<String, String> {
        match &self.format {
            Format::Json => json_text(bytes),
            #[cfg(feature = "kafka-avro")]
            Format::Avro(schema) => avro_json(schema, bytes),
            #[cfg(feature = "kafka-protobuf")]
            Format::Protobuf { decode, .. } => decode(bytes),
        }
    }
}

/// UTF-8 JSON, checked, as its text.
fn json_text(bytes: &[u8]) -> Result<String, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "is not UTF-8 text".to_owned())?;
    match serde_json::from_str::<serde::de::IgnoredAny>(text) {
        Ok(_) => Ok(text.to_owned()),
        // Where it stops, never what it read.
        Err(e) => Err(format!(
            "is not JSON (line {}, column {})",
            e.line(),
            e.column()
        )),
    }
}

#[cfg(feature = "kafka-avro")]
fn avro_json(writer: &super::avro::Writer, bytes: &[u8]) -> Result<String, String> {
    let json = writer
        .decode(bytes)
        .map_err(|why| format!("is not Avro of the writer schema: it {why}"))?;
    serde_json::to_string(&json).map_err(|_| "is Avro, but has no JSON form".to_owned())
}

/// zlib, inflated up to [`MAX_INFLATED`] bytes; the stream must end where the part does.
fn inflate(data: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let mut decoder = flate2::read::ZlibDecoder::new(data);
    (&mut decoder)
        .take(MAX_INFLATED + 1)
        .read_to_end(&mut out)
        .map_err(|_| "is marked zlib-compressed (Glue) but does not inflate".to_owned())?;
    if out.len() as u64 > MAX_INFLATED {
        return Err(format!(
            "inflates (zlib, Glue) to more than {} MiB",
            MAX_INFLATED / 1024 / 1024
        ));
    }
    if decoder.total_in() != data.len() as u64 {
        return Err("has bytes after its zlib stream (Glue)".to_owned());
    }
    Ok(out)
}

/// An unsigned varint and the bytes after it.
#[cfg(feature = "kafka-protobuf")]
fn varint(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let mut value: u64 = 0;
    for (i, byte) in bytes.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((value, &bytes[i + 1..]));
        }
    }
    None
}

/// The bytes after Confluent's message-index list (zig-zag varints); `None` when the list
/// does not read (a count or an index out of range).
#[cfg(feature = "kafka-protobuf")]
fn skip_message_indexes(bytes: &[u8]) -> Option<&[u8]> {
    let read = |bytes| {
        let (raw, rest) = varint(bytes)?;
        Some((((raw >> 1) as i64) ^ -((raw & 1) as i64), rest))
    };
    let (count, mut rest) = read(bytes)?;
    if !(0..=64).contains(&count) {
        return None;
    }
    for _ in 0..count {
        let (index, after) = read(rest)?;
        if index < 0 {
            return None;
        }
        rest = after;
    }
    Some(rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_framings_are_taken_off() {
        let json = Decoder::json();
        assert_eq!(json.decode(br#"{"a":1}"#, None).unwrap(), r#"{"a":1}"#);
        let mut confluent = vec![0, 0, 0, 0, 9];
        confluent.extend_from_slice(br#"{"a":1}"#);
        assert_eq!(json.decode(&confluent, None).unwrap(), r#"{"a":1}"#);
        let only = Decoder::json().schema_ids([8]);
        let why = only.decode(&confluent, None).unwrap_err();
        assert!(why.contains("unknown schema id 9"), "{why}");
        let mut glue = vec![3, 0];
        glue.extend_from_slice(&[7; 16]);
        glue.extend_from_slice(br#"[1]"#);
        assert_eq!(json.decode(&glue, None).unwrap(), "[1]");
        let why = json.decode(b"{\"secret\": ", None).unwrap_err();
        assert!(!why.contains("secret"), "{why}");
        assert!(json.decode(&[0, 0, 0], None).is_err());
    }

    #[test]
    fn glue_zlib_is_inflated_and_a_bomb_is_refused() {
        use std::io::Write as _;
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(br#"{"n":2}"#).unwrap();
        let mut glue = vec![3, 5];
        glue.extend_from_slice(&[1; 16]);
        glue.extend_from_slice(&z.finish().unwrap());
        assert_eq!(Decoder::json().decode(&glue, None).unwrap(), r#"{"n":2}"#);
        let versioned = Decoder::json()
            .schema_versions(["02020202-0202-0202-0202-020202020202"])
            .unwrap();
        let why = versioned.decode(&glue, None).unwrap_err();
        assert!(why.contains("unknown Glue schema version"), "{why}");
        glue[1] = 4;
        assert!(
            Decoder::json()
                .decode(&glue, None)
                .unwrap_err()
                .contains("compression byte 4")
        );
    }

    #[cfg(feature = "kafka-protobuf")]
    #[derive(Clone, PartialEq, prost::Message, serde::Serialize)]
    struct Pb {
        #[prost(string, tag = "1")]
        id: String,
    }

    /// Confluent's message-index list as zig-zag varints (the deprecated unsigned form fails,
    /// never misread); Glue's one unsigned index.
    #[cfg(feature = "kafka-protobuf")]
    #[test]
    fn protobuf_message_indexes_of_both_confluent_formats_and_of_glue_are_skipped() {
        use prost::Message as _;
        let message = Pb { id: "p-1".into() }.encode_to_vec();
        let decoder = Decoder::protobuf::<Pb>();
        let framed = |prefix: &[u8]| [prefix, &message].concat();
        for prefix in [
            &[0, 0, 0, 0, 1, 0][..],   // the first message
            &[0, 0, 0, 0, 1, 2, 2],    // [1], zig-zag
            &[0, 0, 0, 0, 1, 4, 2, 4], // [1, 2], zig-zag
        ] {
            assert_eq!(
                decoder.decode(&framed(prefix), None).unwrap(),
                r#"{"id":"p-1"}"#,
                "{prefix:?}"
            );
        }
        let mut glue = vec![3, 0];
        glue.extend_from_slice(&[9; 16]);
        glue.push(1);
        assert_eq!(
            decoder.decode(&framed(&glue), None).unwrap(),
            r#"{"id":"p-1"}"#
        );
        let why = decoder
            .decode(&framed(&[0, 0, 0, 0, 1, 1, 1]), None)
            .unwrap_err();
        assert!(why.contains("message-index list"), "{why}");
        // Plain, told apart by its first byte (a field tag, never 0 or 3).
        assert_eq!(decoder.decode(&message, None).unwrap(), r#"{"id":"p-1"}"#);
        let why = decoder
            .decode(&framed(&[0, 0, 0, 0, 1, 0])[..8], None)
            .unwrap_err();
        assert!(why.contains("is not Protobuf of it"), "{why}");
    }

    #[test]
    fn a_zlib_bomb_and_bytes_after_the_stream_fail() {
        use std::io::Write as _;
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        z.write_all(&vec![b' '; (MAX_INFLATED + 1) as usize])
            .unwrap();
        let compressed = z.finish().unwrap();
        assert!(compressed.len() < 100_000, "{}", compressed.len());
        let mut glue = vec![3, 5];
        glue.extend_from_slice(&[1; 16]);
        glue.extend_from_slice(&compressed);
        let why = Decoder::json().decode(&glue, None).unwrap_err();
        assert!(why.contains("more than 16 MiB"), "{why}");
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(b"[1]").unwrap();
        let mut glue = vec![3, 5];
        glue.extend_from_slice(&[1; 16]);
        glue.extend_from_slice(&z.finish().unwrap());
        glue.push(b'x');
        let why = Decoder::json().decode(&glue, None).unwrap_err();
        assert!(why.contains("after its zlib stream"), "{why}");
    }

    /// Once ids are given, a part must name one: a plain part, a Glue part under another
    /// version, a registered part whose metadata names another id, all fail.
    #[test]
    fn schema_ids_once_given_admit_only_parts_that_name_one() {
        let only = Decoder::json().schema_ids([5]);
        assert!(
            only.decode(b"[1]", None)
                .unwrap_err()
                .contains("no schema id")
        );
        let mut glue = vec![3, 0];
        glue.extend_from_slice(&[7; 16]);
        glue.extend_from_slice(b"[1]");
        assert!(
            only.decode(&glue, None)
                .unwrap_err()
                .contains("unknown Glue")
        );
        let registered = serde_json::json!({"dataFormat": "JSON", "schemaId": "6"});
        let why = only.decode(b"[1]", Some(&registered)).unwrap_err();
        assert!(why.contains("unknown schema id 6"), "{why}");
        let registered = serde_json::json!({"dataFormat": "JSON", "schemaId": "5"});
        assert_eq!(only.decode(b"[1]", Some(&registered)).unwrap(), "[1]");
    }

    /// A registered part that reads both as the format and as JSON is not guessed.
    #[cfg(feature = "kafka-avro")]
    #[test]
    fn a_registered_part_read_both_ways_fails_and_one_way_is_taken() {
        let key = Decoder::avro(r#""string""#).unwrap();
        let registered = serde_json::json!({"dataFormat": "AVRO", "schemaId": "1"});
        // `"abcdefghijklmnop"` as JSON is also an Avro string of 17 bytes.
        let both = br#""abcdefghijklmnop""#;
        let why = key.decode(both, Some(&registered)).unwrap_err();
        assert!(why.contains("reads both"), "{why}");
        // JSON only (the mapping's EventRecordFormat JSON).
        assert_eq!(
            key.decode(br#""ab""#, Some(&registered)).unwrap(),
            r#""ab""#
        );
        // Avro only (SOURCE: the framing off).
        assert_eq!(
            key.decode(&[4, b'a', b'b'], Some(&registered)).unwrap(),
            r#""ab""#
        );
    }
}
