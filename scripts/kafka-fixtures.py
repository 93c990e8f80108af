#!/usr/bin/env python3
"""Writes events/streams/kafka-avro.json and kafka-protobuf.json: Lambda MSK events whose
records were encoded by producers' own libraries, never by hand.

* Avro: Apache's `avro` package (plain datums) and Confluent's `AvroSerializer` (its framing:
  magic byte 0, 4-byte schema id), against Confluent's in-process mock registry (`mock://`).
* Protobuf: Google's `protobuf` package (plain messages, classes made by `grpcio-tools`' protoc
  from events/streams/schemas/payments.proto) and Confluent's `ProtobufSerializer` (its framing
  with the message-index list: `Payment` is the file's second message, so the list is [1]).
* AWS Glue Schema Registry framing per AWS's documented layout (header version byte 3,
  compression byte 0 or 5, the schema version's 16-byte UUID, the datum, zlib-compressed under
  5) around the plain bytes above, and for Protobuf the message's index in its file before the
  message (an unsigned varint, as awslabs/aws-glue-schema-registry's ProtobufWireFormatEncoder
  writes it): Glue's serializers are Java only.

Run through `make kafka-fixtures` (a venv of its own, scripts/pytool.sh); the events are
committed, and tests/suite/test_kafka_schema.rs reads them. Output is deterministic: run it twice
and git shows no change.
"""
import base64
import io
import json
import os
import subprocess
import sys
import tempfile
import uuid
import zlib

import avro.io
import avro.schema
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCHEMAS = os.path.join(ROOT, "events", "streams", "schemas")
AVSC = os.path.join(SCHEMAS, "payment.avsc")
PROTO = os.path.join(SCHEMAS, "payments.proto")
GLUE_VERSION = uuid.UUID("b7b4a7f0-9c2e-4c1a-8f3d-2a6c0e5d4f11")

PAYMENTS = [
    {"payment_id": "pay-1", "account": "alice", "cents": 1250, "currency": "EUR", "memo": None},
    {"payment_id": "pay-2", "account": "bob", "cents": 700, "currency": "USD", "memo": "rent"},
    {"payment_id": "pay-3", "account": "carol", "cents": 99, "currency": "GBP", "memo": None},
    {"payment_id": "pay-4", "account": "alice", "cents": 500, "currency": "EUR", "memo": "tip"},
    {"payment_id": "pay-5", "account": "bob", "cents": 300, "currency": "USD", "memo": None},
    {"payment_id": "pay-6", "account": "carol", "cents": 42, "currency": "EUR", "memo": None},
]


def b64(data):
    return None if data is None else base64.b64encode(data).decode()


def glue(data, compress):
    body = zlib.compress(data) if compress else data
    return bytes([3, 5 if compress else 0]) + GLUE_VERSION.bytes + body


def record(topic, partition, offset, value, key=None, headers=None, metadata=None):
    out = {
        "topic": topic,
        "partition": partition,
        "offset": offset,
        "timestamp": 1764806400000 + offset,
        "timestampType": "CREATE_TIME",
        "key": b64(key),
        "value": b64(value),
        "headers": headers or [],
    }
    if metadata is not None:
        out["valueSchemaMetadata"] = metadata
    return out


def event(records):
    by_partition = {}
    for r in records:
        by_partition.setdefault(f"{r['topic']}-{r['partition']}", []).append(r)
    return {
        "eventSource": "aws:kafka",
        "eventSourceArn": "arn:aws:kafka:us-east-1:123456789012:cluster/payments/abcd1234-ab12-cd34-ef56-abcdef123456-1",
        "bootstrapServers": "b-1.payments.a1bcde.c1.kafka.us-east-1.amazonaws.com:9098",
        "records": by_partition,
    }


def header(name, text):
    return {name: list(text.encode())}


def avro_event():
    with open(AVSC) as f:
        schema_text = f.read()
    schema = avro.schema.parse(schema_text)

    def plain(payment):
        out = io.BytesIO()
        avro.io.DatumWriter(schema).write(payment, avro.io.BinaryEncoder(out))
        return out.getvalue()

    registry = SchemaRegistryClient.new_client({"url": "mock://fixtures"})
    serializer = AvroSerializer(registry, schema_text, conf={"auto.register.schemas": True})

    def confluent(payment):
        return serializer(payment, SerializationContext("payments", MessageField.VALUE))

    p = PAYMENTS
    first = confluent(p[0])
    schema_id = int.from_bytes(first[1:5], "big")
    unknown = bytes([0]) + (schema_id + 98).to_bytes(4, "big") + plain(p[2])
    truncated = confluent(p[3])[:-3]
    records = [
        # payments-0: Confluent's framing; a payment produced twice (offset 11); a tombstone;
        # a truncated datum that fails alone and stops the partition before offset 14.
        record("payments", 0, 10, first, b"pay-1", [header("trace", "t-1")]),
        record("payments", 0, 11, confluent(p[0]), b"pay-1"),
        record("payments", 0, 12, None, b"pay-2"),
        record("payments", 0, 13, truncated, b"pay-4"),
        record("payments", 0, 14, confluent(p[4]), b"pay-5"),
        # payments-1: Glue's framing, plain and zlib; then a schema id the consumer does not know.
        record("payments", 1, 3, glue(plain(p[1]), False), b"pay-2"),
        record("payments", 1, 4, glue(plain(p[2]), True), b"pay-3"),
        record("payments", 1, 5, unknown, b"pay-3"),
        # payments-2: what the mapping's schema registry integration hands over: the framing
        # taken off (EventRecordFormat SOURCE), or the record decoded to JSON (JSON).
        record("payments", 2, 0, plain(p[5]), b"pay-6",
               metadata={"dataFormat": "AVRO", "schemaId": str(schema_id)}),
        record("payments", 2, 1, json.dumps(p[3], separators=(",", ":")).encode(), b"pay-4",
               metadata={"dataFormat": "AVRO", "schemaId": str(schema_id)}),
        # payments-3: a first byte that is neither framing's.
        record("payments", 3, 7, bytes([7]) + plain(p[4]), b"pay-5"),
    ]
    return event(records), schema_id


def protobuf_event():
    with tempfile.TemporaryDirectory() as out:
        subprocess.run(
            [sys.executable, "-m", "grpc_tools.protoc", f"-I{SCHEMAS}", f"--python_out={out}", PROTO],
            check=True,
        )
        sys.path.insert(0, out)
        import payments_pb2  # noqa: E402  (made just above)

    def message(payment):
        m = payments_pb2.Payment(
            payment_id=payment["payment_id"],
            account=payment["account"],
            cents=payment["cents"],
            currency=payments_pb2.Currency.Value(payment["currency"]),
        )
        if payment["memo"] is not None:
            m.memo = payment["memo"]
        return m

    registry = SchemaRegistryClient.new_client({"url": "mock://fixtures-pb"})
    serializer = ProtobufSerializer(
        payments_pb2.Payment,
        registry,
        conf={"auto.register.schemas": True, "use.deprecated.format": False},
    )

    def confluent(payment):
        return serializer(message(payment), SerializationContext("payments-pb", MessageField.VALUE))

    def plain(payment):
        return message(payment).SerializeToString(deterministic=True)

    p = PAYMENTS
    first = confluent(p[0])
    schema_id = int.from_bytes(first[1:5], "big")
    records = [
        record("payments-pb", 0, 20, first, b"pay-1"),
        record("payments-pb", 0, 21, confluent(p[0]), b"pay-1"),
        record("payments-pb", 0, 22, None, b"pay-2"),
        record("payments-pb", 0, 23, confluent(p[3])[:-2], b"pay-4"),
        record("payments-pb", 0, 24, confluent(p[4]), b"pay-5"),
        # Glue's Protobuf: the message index (`Payment` is the file's message 1) first.
        record("payments-pb", 1, 3, glue(bytes([1]) + plain(p[1]), False), b"pay-2"),
        record("payments-pb", 1, 4, glue(bytes([1]) + plain(p[2]), True), b"pay-3"),
        record("payments-pb", 2, 0, plain(p[5]), b"pay-6"),
    ]
    return event(records), schema_id, first[5:7]


def avro_types():
    """Every Avro type, written by fastavro (another producer library than the events'), with the
    JSON the consumer must hand over: a differential check of the crate's Avro reader."""
    import decimal
    import fastavro

    schema = {
        "type": "record", "name": "AllTypes", "namespace": "com.example",
        "fields": [
            {"name": "b", "type": "boolean"},
            {"name": "i", "type": "int"},
            {"name": "l", "type": "long"},
            {"name": "f", "type": "float"},
            {"name": "d", "type": "double"},
            {"name": "by", "type": "bytes"},
            {"name": "s", "type": "string"},
            {"name": "n", "type": "null"},
            {"name": "e", "type": {"type": "enum", "name": "Suit", "symbols": ["HEARTS", "SPADES"]}},
            {"name": "fx", "type": {"type": "fixed", "name": "Four", "size": 4}},
            {"name": "arr", "type": {"type": "array", "items": "long"}},
            {"name": "m", "type": {"type": "map", "values": ["null", "string"]}},
            {"name": "u", "type": ["null", "string", "long", "Suit"]},
            {"name": "nested", "type": {"type": "record", "name": "Inner", "fields": [
                {"name": "x", "type": "int"}, {"name": "again", "type": "Four"}]}},
            {"name": "inners", "type": {"type": "array", "items": "Inner"}},
            {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}},
            {"name": "fixed_amount", "type": {"type": "fixed", "name": "Dec8", "size": 8,
                                              "logicalType": "decimal", "precision": 18, "scale": 4}},
            {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
            {"name": "day", "type": {"type": "int", "logicalType": "date"}},
            {"name": "at_ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "at_us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
            {"name": "t_ms", "type": {"type": "int", "logicalType": "time-millis"}},
        ],
    }
    parsed = fastavro.parse_schema(schema)
    import datetime
    cases = []
    rows = [
        (True, 0, 0, 0.0, 0.0, b"", "", "HEARTS", b"\x00\x01\x02\x03", [], {}, None,
         0, [], "0.00", "0.0000", 0, 0, 0),
        (False, -2147483648, -9223372036854775808, -1.5, 1e300, b"\xff\x00", "héllo ✓", "SPADES",
         b"abcd", [1, -1, 2**40], {"k": None, "z": "v"}, "txt", 7,
         [3, -4], "-1234567890.99", "1234.5678", 19000, 1764806400123, 1764806400123456),
        (True, 2147483647, 9223372036854775807, 3.25, -2.5e-300, bytes(range(256)), "x" * 300,
         "HEARTS", b"\xff\xff\xff\xff", list(range(200)), {str(i): str(i) for i in range(70)},
         -5, 86399999, [], "99.01", "-0.0001", -1, -1, -1),
    ]
    import uuid as uuidlib
    for n, row in enumerate(rows):
        (b, i, l, f, d, by, s, e, fx, arr, m, u, x, inner_xs, amount, fixed_amount, day, ms, us) = row
        t_ms = [0, 123456, 86399999][n]
        record = {
            "b": b, "i": i, "l": l, "f": f, "d": d, "by": by, "s": s, "n": None, "e": e,
            "fx": fx, "arr": arr, "m": m,
            "u": u,
            "nested": {"x": x, "again": fx},
            "inners": [{"x": v, "again": fx} for v in inner_xs],
            "amount": decimal.Decimal(amount),
            "fixed_amount": decimal.Decimal(fixed_amount),
            "id": str(uuidlib.UUID(int=n * 0x1234567890ABCDEF)),
            "day": datetime.date(1970, 1, 1) + datetime.timedelta(days=day),
            "at_ms": datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc),
            "at_us": datetime.datetime.fromtimestamp(us // 1_000_000, tz=datetime.timezone.utc)
                     + datetime.timedelta(microseconds=us % 1_000_000),
            "t_ms": datetime.time(t_ms // 3600000, (t_ms // 60000) % 60, (t_ms // 1000) % 60,
                                  (t_ms % 1000) * 1000),
        }
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, record)
        expected = {
            "b": b, "i": i, "l": l, "f": f, "d": d, "by": list(by), "s": s, "n": None, "e": e,
            "fx": list(fx), "arr": arr, "m": m, "u": record["u"],
            "nested": {"x": x, "again": list(fx)},
            "inners": [{"x": v, "again": list(fx)} for v in inner_xs],
            "amount": amount, "fixed_amount": fixed_amount,
            "id": record["id"], "day": day, "at_ms": ms, "at_us": us, "t_ms": t_ms,
        }
        cases.append({"bytes": b64(out.getvalue()), "expected": expected})
    # The same record read back by fastavro, to show the bytes are what the schema says.
    for case in cases:
        fastavro.schemaless_reader(io.BytesIO(base64.b64decode(case["bytes"])), parsed)
    return {"writer": f"fastavro {fastavro.__version__}", "schema": schema, "cases": cases}


def main():
    streams = os.path.join(ROOT, "events", "streams")
    with open(os.path.join(streams, "avro-types.json"), "w") as f:
        json.dump(avro_types(), f, indent=2, ensure_ascii=False)
        f.write("\n")
    avro_ev, avro_id = avro_event()
    pb_ev, pb_id, indexes = protobuf_event()
    for name, ev in (("kafka-avro.json", avro_ev), ("kafka-protobuf.json", pb_ev)):
        with open(os.path.join(streams, name), "w") as f:
            json.dump(ev, f, indent=2)
            f.write("\n")
    print(f"Avro schema id {avro_id}; Protobuf schema id {pb_id}, message-index bytes {list(indexes)}")


if __name__ == "__main__":
    main()
