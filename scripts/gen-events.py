#!/usr/bin/env python3
"""Generates the sample SQS events in events/ and their expected outcomes.

    python3 scripts/gen-events.py            # rewrites events/*.json, expected.json, README.md
    python3 scripts/gen-events.py --check    # exits 1 if a committed file differs (CI)

Every file is derived from fixed seeds, so a run reproduces the committed bytes exactly.

The events are in the wire format Lambda hands an SQS-triggered function: real-looking v4
message ids, opaque receipt handles, `md5OfBody` = the MD5 of the body, and
`md5OfMessageAttributes` computed with SQS's own algorithm where a message has attributes.

events/expected.json is what the reference consumer should answer for each event, on a fresh
store and on a second run against the same store. It is computed here by a small model of the
consumer's rules (below), independent of the Rust code, and tests/suite/test_events.rs checks the real
processor against it: if the two disagree, one of them is wrong.

The rules the model encodes (the reference consumer's, with `SQS_CLAIM_KEY=json:/order_id`):
  * the idempotency key is the body's `order_id`; a body that is not JSON, or has no
    `order_id`, fails with `missing_key` and the handler never runs;
  * a key completed before (this run or an earlier one) is a `duplicate`, skipped;
  * a later copy of a key inside one batch waits for the first copy and takes its outcome;
  * the handler decodes `{"order_id", "account", "amount_cents": integer}`; a wrong shape or a
    negative amount fails with `handler_error` (the claim is released: it fails again next time);
  * FIFO (source ARN ending in `.fifo`): after a failure, every later message of the same
    MessageGroupId is `not_started` (`earlier_failure_in_group`); other groups go on. A standard
    queue whose messages carry MessageGroupId (a fair queue) is NOT FIFO.
"""

import argparse
import base64
import hashlib
import json
import os
import struct
import sys
import uuid

REGION = "us-east-1"
ACCOUNT_ID = "123456789012"
QUEUE_ARN = f"arn:aws:sqs:{REGION}:{ACCOUNT_ID}:payments"
FIFO_QUEUE_ARN = f"arn:aws:sqs:{REGION}:{ACCOUNT_ID}:payments.fifo"
SENDER_ID = "AIDAIENQZJOLO23YVJ4VO"
# 2026-11-30T03:00:00Z, in epoch milliseconds, as SQS stamps SentTimestamp.
BASE_MS = 1_795_921_200_000
EVENTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "events")


def digest(*parts):
    return hashlib.sha256("/".join(str(p) for p in parts).encode()).digest()


def message_id(event, n):
    """A v4-shaped UUID, derived from a seed so every run produces the same one."""
    return str(uuid.UUID(bytes=digest("message-id", event, n)[:16], version=4))


def receipt_handle(event, n, delivery):
    raw = b"".join(digest("receipt", event, n, delivery, i) for i in range(4))
    return "AQEB" + base64.b64encode(raw).decode()


def md5_of_message_attributes(attrs):
    """SQS's MD5 of message attributes: per attribute, sorted by name, the length-prefixed
    (4-byte big-endian) name, data type, a transport byte (1 string, 2 binary) and value."""
    buf = b""
    for name in sorted(attrs):
        a = attrs[name]
        for field in (name, a["dataType"]):
            b = field.encode()
            buf += struct.pack(">I", len(b)) + b
        if a.get("stringValue") is not None:
            b = a["stringValue"].encode()
            buf += b"\x01" + struct.pack(">I", len(b)) + b
        else:
            b = base64.b64decode(a["binaryValue"])
            buf += b"\x02" + struct.pack(">I", len(b)) + b
    return hashlib.md5(buf).hexdigest()


def credit(order_id, account, amount_cents):
    return json.dumps(
        {"order_id": order_id, "account": account, "amount_cents": amount_cents},
        separators=(",", ":"),
    )


def record(event, n, body, *, mid=None, delivery=1, fifo=None, group=None, attrs=None):
    """One SQS record. `fifo` is (sequence number, deduplication id); `group` alone is a
    fair-queue group on a standard queue."""
    sent = BASE_MS + n * 137
    attributes = {
        "ApproximateReceiveCount": str(delivery),
        "SentTimestamp": str(sent),
        "SenderId": SENDER_ID,
        "ApproximateFirstReceiveTimestamp": str(sent + 41),
    }
    if group is not None:
        attributes["MessageGroupId"] = group
    if fifo is not None:
        seq, dedup = fifo
        attributes["SequenceNumber"] = seq
        attributes["MessageDeduplicationId"] = dedup
    rec = {
        "messageId": mid or message_id(event, n),
        "receiptHandle": receipt_handle(event, n, delivery),
        "body": body,
        "attributes": attributes,
        "messageAttributes": attrs or {},
    }
    if attrs:
        rec["md5OfMessageAttributes"] = md5_of_message_attributes(attrs)
    rec["md5OfBody"] = hashlib.md5(body.encode()).hexdigest()
    rec["eventSource"] = "aws:sqs"
    rec["eventSourceARN"] = FIFO_QUEUE_ARN if fifo is not None else QUEUE_ARN
    rec["awsRegion"] = REGION
    return rec


def string_attr(value):
    return {
        "stringValue": value,
        "stringListValues": [],
        "binaryListValues": [],
        "dataType": "String",
    }


# ---------------------------------------------------------------------------------------------
# The events


def plain():
    e = "plain"
    credits = [
        ("ord-1001", "acct-alice", 1250),
        ("ord-1002", "acct-bob", 700),
        ("ord-1003", "acct-carol", 99),
        ("ord-1004", "acct-alice", 500),
    ]
    attrs = {"producer": string_attr("checkout"), "schema": string_attr("credit.v1")}
    return [record(e, n, credit(*c), attrs=attrs) for n, c in enumerate(credits)]


def duplicates():
    e = "duplicates"
    first = record(e, 0, credit("ord-2001", "acct-alice", 1000))
    return [
        first,
        record(e, 1, credit("ord-2002", "acct-bob", 2500)),
        # The same message (same id, same body) delivered a second time in the same batch,
        # with a new receipt handle and a higher receive count.
        record(e, 0, first["body"], mid=first["messageId"], delivery=2),
        # A producer-side duplicate: the same order sent again, so SQS gave it a new id.
        record(e, 3, credit("ord-2002", "acct-bob", 2500)),
        record(e, 4, credit("ord-2003", "acct-carol", 300)),
    ]


def malformed():
    e = "malformed"
    return [
        record(e, 0, credit("ord-3001", "acct-alice", 400)),
        # Not JSON at all: the key cannot be read, the handler never runs.
        record(e, 1, "order_id=ord-3002&account=acct-bob&amount_cents=100"),
        record(e, 2, credit("ord-3003", "acct-bob", 250)),
        # JSON with the key, but the amount is a string: the handler's decode fails.
        record(
            e,
            3,
            json.dumps(
                {"order_id": "ord-3004", "account": "acct-carol", "amount_cents": "12.50"},
                separators=(",", ":"),
            ),
        ),
        # JSON without the key (camelCase field): missing key.
        record(
            e,
            4,
            json.dumps(
                {"orderId": "ord-3005", "account": "acct-dave", "amount_cents": 100},
                separators=(",", ":"),
            ),
        ),
        record(e, 5, credit("ord-3006", "acct-carol", 75)),
    ]


def negative_amount():
    e = "negative-amount"
    return [
        record(e, 0, credit("ord-4001", "acct-alice", 1500)),
        record(e, 1, credit("ord-4002", "acct-bob", -500)),
        record(e, 2, credit("ord-4003", "acct-carol", 200)),
    ]


GROUPED = [
    ("acct-alice", "ord-5001", 100),
    ("acct-bob", "ord-5101", 100),
    ("acct-alice", "ord-5002", -50),  # fails: negative
    ("acct-bob", "ord-5102", 200),
    ("acct-alice", "ord-5003", 300),
    ("acct-bob", "ord-5103", 300),
    ("acct-alice", "ord-5004", 400),
]


def fifo():
    e = "fifo"
    out = []
    for n, (account, order, amount) in enumerate(GROUPED):
        body = credit(order, account, amount)
        seq = str(18_849_496_460_467_696_128 + n * 65_536)
        # Content-based deduplication: the SHA-256 of the body.
        dedup = hashlib.sha256(body.encode()).hexdigest()
        out.append(record(e, n, body, fifo=(seq, dedup), group=account))
    return out


def fair_queue():
    e = "fair-queue"
    out = []
    for n, (account, order, amount) in enumerate(GROUPED):
        order = order.replace("ord-5", "ord-6")
        out.append(record(e, n, credit(order, account, amount), group=account))
    return out


def large():
    e = "large"
    out = []
    for i in range(1000):
        if i % 100 == 99:
            # A producer-side duplicate of the previous message: same body, new message id.
            body = out[-1]["body"]
        else:
            amount = (i * 37) % 5000 + 1
            if i % 250 == 125:
                amount = -amount
            body = credit(f"ord-9{i:04d}", f"acct-{i % 10:02d}", amount)
        out.append(record(e, i, body))
    return out


EVENTS = {
    "plain.json": (plain, "A plain batch of four credits."),
    "duplicates.json": (
        duplicates,
        "The same message id twice (a redelivery inside one batch), and a producer-side "
        "duplicate: the same order_id under a new message id.",
    ),
    "malformed.json": (
        malformed,
        "A body that is not JSON, one with the key but a string amount, one without the key, "
        "among three good credits.",
    ),
    "negative-amount.json": (negative_amount, "One credit with a negative amount among two good ones."),
    "fifo.json": (
        fifo,
        "FIFO queue, two message groups; the third message (group acct-alice) has a negative "
        "amount: it and every later message of acct-alice are reported, acct-bob goes on.",
    ),
    "fair-queue.json": (
        fair_queue,
        "Standard queue whose messages carry MessageGroupId (a fair queue): NOT FIFO, so only "
        "the failing message is reported and the rest of its group runs.",
    ),
    "large.json": (
        large,
        "1,000 credits over 10 accounts; every 100th message repeats the previous order "
        "(10 producer-side duplicates) and 4 have a negative amount.",
    ),
}


# ---------------------------------------------------------------------------------------------
# The model of the reference consumer


def key_of(body):
    try:
        value = json.loads(body)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    k = value.get("order_id")
    if k is None or k == "":
        return None
    return k if isinstance(k, str) else json.dumps(k)


def handle(body, balances):
    """The handler: returns None on success (and credits), else the failure reason."""
    c = json.loads(body)
    amount = c.get("amount_cents")
    if (
        not isinstance(c.get("order_id"), str)
        or not isinstance(c.get("account"), str)
        or not isinstance(amount, int)
        or isinstance(amount, bool)
    ):
        return "handler_error"
    if amount < 0:
        return "handler_error"
    balances[c["account"]] = balances.get(c["account"], 0) + amount
    return None


def run(records, completed, balances, usual):
    is_fifo = any(r["eventSourceARN"].endswith(".fifo") for r in records)
    leaders = {}  # key -> (outcome, reason) of the first copy in this batch
    stopped_groups = set()
    outcomes = []
    for r in records:
        group = r["attributes"].get("MessageGroupId")
        if is_fifo and group in stopped_groups:
            outcome = ("not_started", "earlier_failure_in_group")
        else:
            key = key_of(r["body"])
            if key is None:
                outcome = ("failed", "missing_key")
            elif key in leaders:
                lo = leaders[key]
                outcome = ("duplicate", None) if lo[0] in ("processed", "duplicate") else lo
            elif key in completed:
                outcome = ("duplicate", None)
            else:
                reason = handle(r["body"], balances)
                if reason is None:
                    completed.add(key)
                    outcome = ("processed", None)
                else:
                    outcome = ("failed", reason)
            if key is not None and key not in leaders:
                leaders[key] = outcome
        if is_fifo and outcome[0] not in ("processed", "duplicate"):
            stopped_groups.add(group)
        outcomes.append(outcome)

    failures, seen = [], set()
    counts = {"processed": 0, "duplicate": 0, "held_elsewhere": 0, "failed": 0, "not_started": 0}
    exceptions = []
    for i, (r, (outcome, reason)) in enumerate(zip(records, outcomes)):
        counts[outcome] += 1
        if outcome not in ("processed", "duplicate") and r["messageId"] not in seen:
            seen.add(r["messageId"])
            failures.append({"itemIdentifier": r["messageId"]})
        if outcome != usual:
            ex = {"index": i, "message_id": r["messageId"], "outcome": outcome}
            if reason:
                ex["reason"] = reason
            exceptions.append(ex)
    return {
        "response": {"batchItemFailures": failures},
        "counts": counts,
        "usual": usual,
        "exceptions": exceptions,
        "balances": dict(sorted(balances.items())),
    }


def build():
    files = {}
    expected = {
        "_about": "Generated by scripts/gen-events.py; checked by tests/suite/test_events.rs. For each "
        "event: the reference consumer's answer on a fresh store (runs[0]) and on a second run "
        "against the same store (runs[1]). Every message has the run's `usual` outcome except those "
        "listed in `exceptions` (reason = failure kind or not-started reason); `balances` are the "
        "cumulative credits per account after the run.",
        "key": "json:/order_id",
        "namespace": "payments",
        "events": {},
    }
    for name, (make, summary) in EVENTS.items():
        records = make()
        indent = None if name == "large.json" else 2
        files[name] = json.dumps({"Records": records}, indent=indent) + "\n"
        completed, balances = set(), {}
        ids = [r["messageId"] for r in records]
        expected["events"][name] = {
            "summary": summary,
            "fifo": records[0]["eventSourceARN"].endswith(".fifo"),
            "records": len(records),
            "repeated_message_ids": len(set(ids)) != len(ids),
            "runs": [
                run(records, completed, balances, "processed"),
                run(records, completed, balances, "duplicate"),
            ],
        }
    files["expected.json"] = json.dumps(expected, indent=2) + "\n"
    files["README.md"] = readme(expected)
    return files


def counts_text(counts):
    return ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in counts.items() if n)


def readme(expected):
    rows = []
    for name, e in expected["events"].items():
        runs = []
        for run in e["runs"]:
            ids = [f["itemIdentifier"] for f in run["response"]["batchItemFailures"]]
            why = {x["message_id"]: x.get("reason", x["outcome"]) for x in run["exceptions"]}
            failures = "<br>".join(f"`{i}` ({why.get(i, '?')})" for i in ids) or "none"
            runs.append(f"{counts_text(run['counts'])}; reported: {failures}")
        balances = ", ".join(f"{k} {v}" for k, v in e["runs"][1]["balances"].items())
        rows.append(
            f"| `{name}` | {e['records']}{' (FIFO)' if e['fifo'] else ''} | {e['summary']} "
            f"| {runs[0]} | {runs[1]} | {balances} |"
        )
    table = "\n".join(rows)
    return f"""# Sample events

Lambda SQS events in the exact wire format Lambda sends (v4 message ids, receipt handles,
`md5OfBody` = the MD5 of the body, `md5OfMessageAttributes` where a message has attributes), for
the reference consumer (`examples/payments/src/bin/consumer.rs`). Each body is a credit:
`{{"order_id": "ord-1001", "account": "acct-alice", "amount_cents": 1250}}`; the consumer keys on
`order_id` (`SQS_CLAIM_KEY=json:/order_id`, namespace `payments`), fails a body it cannot read
or a negative amount, and credits the account otherwise.

Every file here is generated; do not edit them by hand:

<!-- check-docs: run -->
```sh
python3 scripts/gen-events.py           # rewrite events/*.json, expected.json and this README
python3 scripts/gen-events.py --check   # exit 1 if a committed file is stale
```

`expected.json` is the machine-readable version of the table below (computed by a model of the
consumer's rules in the generator, independent of the Rust code); `tests/suite/test_events.rs` runs
every event through `sqs_claim::Processor` on a `MemoryStore` twice and checks the batch
response, the counts, every non-usual outcome and the balances against it.

Try one against the local loop (see [docs/library.md](../docs/library.md) and the README's *Try the example app*):

<!-- check-docs: skip leaves cargo lambda watch running (docs/deploy.md's local loop) -->
```sh
cargo lambda watch -A 127.0.0.1 &
cargo lambda invoke consumer -A 127.0.0.1 --data-file events/plain.json
```

The first run is on a fresh store; the second sends the same event again to the same store, as
SQS does after a timeout or a lost acknowledgement. "Reported" is the `batchItemFailures` of the
response, in batch order, with the reason (failure kind, or why the message was not started).
Balances are the credits per account after both runs: the second run never credits again.

| event | records | what it shows | first run (fresh store) | second run (same store) | balances after both |
|-------|---------|---------------|-------------------------|-------------------------|---------------------|
{table}

Reasons: `missing_key` = no `order_id` could be read (the handler never ran);
`handler_error` = the handler refused the body (wrong shape, negative amount; the claim was
released, so it fails the same way on every delivery until it reaches the dead-letter queue);
`earlier_failure_in_group` = FIFO only: an earlier message of the same `MessageGroupId` did not
succeed, so this one was not started, to keep the group's order.
"""


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--check", action="store_true", help="fail if a committed file is stale")
    args = p.parse_args()
    stale = []
    for name, text in build().items():
        path = os.path.join(EVENTS_DIR, name)
        if args.check:
            try:
                with open(path, encoding="utf-8") as f:
                    if f.read() != text:
                        stale.append(name)
            except FileNotFoundError:
                stale.append(name)
        else:
            os.makedirs(EVENTS_DIR, exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            print(f"wrote events/{name} ({len(text)} bytes)")
    if stale:
        print("stale: " + ", ".join(stale) + " (run python3 scripts/gen-events.py)", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
