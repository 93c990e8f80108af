#!/usr/bin/env python3
"""Deploy template.yaml onto ministack as a CloudFormation stack, feed it, check it, delete it.

Run by scripts/deploy-local.sh (`make deploy-local`), which builds the consumer and gives this
script a Python with boto3 and PyYAML. What it does, in order:

 1. reads template.yaml as it is in the work tree (its parameters and their defaults; nothing
    is copied), writes it as JSON with the short forms (`!Ref`, `!If`, ...) as their long forms,
    and points each SAM function's local `CodeUri` at the uploaded zip;
 2. zips the consumer binary as `bootstrap` and uploads it to a bucket of its own in ministack's S3;
 3. creates a bucket of its own for large payloads and the stack (the template's defaults, but
    LargePayloadBucket = that bucket and DeleteLargePayloads=true, unless --parameter names
    LargePayloadBucket; other --parameter overrides as given), waits for CREATE_COMPLETE;
 4. sends one SendMessageBatch: payments, some of them twice (a producer's resend), and a body that
    does not parse; later resends two payments again (duplicates across invocations);
 5. waits until the input queue is empty, then checks the balances in the stack's accounts table
    (each payment credited once) and the bad body in the stack's dead-letter queue with its reason
    (the consumer's failure destination: the `sqs-claim.failure` message attribute, JSON,
    docs/operating.md);
 6. uploads a payment over SQS's 256 KiB limit to the payloads bucket and sends the extended
    clients' pointer to it (attribute ExtendedPayloadSize) twice in one batch, then a resend
    pointing at a second copy of the object; checks it credited once, its object deleted after
    completion and the resend's own object too (deletion on), the other objects untouched, nothing
    dead-lettered (docs/large-messages.md);
 7. deletes the stack, what the template retains on deletion, and the buckets, whatever happened,
    and checks that nothing named after the stack is left.

With --streams it deploys examples/streams/template.yaml instead (the `stream-consumer` binary,
one function per source), and in place of steps 4 to 6: puts payments on the stack's Kinesis
stream (two of them written twice by the producer, later the whole lot again) and new orders
into its orders table (INSERTs, then an update and a delete of one of them), waits until the
accounts table holds the expected balances, and checks that they stay so (each record credited
once, each order's claim completed; updates and deletes credit nothing). ministack's stream
mappings ignore partial batch responses (they go on past every batch) and it has no Kafka
poller: what is checked is what they deliver, each record once.

Where ministack differs from CloudFormation it says so (lines starting "ministack:") and works
around it without changing what the template means:
 * its YAML reader refuses `!Contains`: the template is sent as JSON with `Fn::` long forms
   (the same template; CloudFormation reads both);
 * its SQS event source mapping keeps BatchSize, MaximumBatchingWindowInSeconds and
   ScalingConfig.MaximumConcurrency as the strings the template resolves them to, and its poller
   then fails comparing them to numbers: they are sent again, same values, as numbers with
   UpdateEventSourceMapping;
 * resources with `DeletionPolicy: Retain` (the accounts table) stay after DeleteStack, as on
   AWS: this script deletes them itself so that a local run leaves nothing behind.

Exit status 0 only when every check passed and the clean-up succeeded.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import signal
import sys
import time
import uuid
import zipfile

import boto3
import botocore.config
import botocore.exceptions
import yaml

REGION = "us-east-1"
SAM_FUNCTION = "AWS::Serverless::Function"


def log(msg: str) -> None:
    print(f"deploy-local: {msg}", flush=True)


def note(msg: str) -> None:
    """A difference between ministack and CloudFormation, and what this script does about it."""
    print(f"ministack: {msg}", flush=True)


class CheckFailed(Exception):
    pass


def check(ok: bool, what: str) -> None:
    if not ok:
        raise CheckFailed(what)
    log(f"ok: {what}")


# ------------------------------------------------------------------------------- the template

class CfnLoader(yaml.SafeLoader):
    """PyYAML's safe loader, plus CloudFormation's short-form tags as their long forms."""


def _short_form(loader: CfnLoader, tag_suffix: str, node: yaml.Node):
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    if tag_suffix == "Ref":
        return {"Ref": value}
    if tag_suffix == "Condition":
        return {"Condition": value}
    if tag_suffix == "GetAtt" and isinstance(value, str):
        # `!GetAtt A.B` is ["A", "B"]; the attribute part may itself hold dots.
        resource, _, attribute = value.partition(".")
        value = [resource, attribute]
    return {f"Fn::{tag_suffix}": value}


CfnLoader.add_multi_constructor("!", _short_form)


def load_template(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        template = yaml.load(f, Loader=CfnLoader)  # noqa: S506 - a SafeLoader subclass
    if not isinstance(template, dict) or "Resources" not in template:
        raise SystemExit(f"deploy-local: {path} is not a CloudFormation template")
    return template


def point_code_at(template: dict, bucket: str, key: str, binary: str) -> list[str]:
    """Every SAM function whose CodeUri is local (what `sam build` would build) gets the zip.

    The template's functions name their binary in Metadata.BuildProperties.Binary; a function
    built from another binary would need a zip of its own, and this script refuses it."""
    pointed = []
    for name, resource in template["Resources"].items():
        if resource.get("Type") != SAM_FUNCTION:
            continue
        props = resource.setdefault("Properties", {})
        code = props.get("CodeUri")
        if not isinstance(code, str) or code.startswith("s3://"):
            continue
        wants = (resource.get("Metadata") or {}).get("BuildProperties", {}).get("Binary")
        if wants != binary:
            raise SystemExit(
                f"deploy-local: function {name} is built from binary {wants!r}; this script "
                f"builds and uploads only {binary!r}"
            )
        props["CodeUri"] = {"Bucket": bucket, "Key": key}
        pointed.append(name)
    if not pointed:
        raise SystemExit(f"deploy-local: no {SAM_FUNCTION} with a local CodeUri in the template")
    return pointed


# AWS authorizes each SQS batch action by its single action ("SendMessageBatch is authorized by
# sqs:SendMessage"); ministack's IAM evaluator (AUTH=true) asks for the batch action's own name.
SQS_BATCH_ACTIONS = {"sqs:SendMessage": "sqs:SendMessageBatch",
                     "sqs:ChangeMessageVisibility": "sqs:ChangeMessageVisibilityBatch",
                     "sqs:DeleteMessage": "sqs:DeleteMessageBatch"}


def grant_batch_actions(node) -> int:
    """Every IAM statement granting an SQS action also names its batch action, as ministack
    needs when it enforces IAM (no change on AWS, where the batch action is the single one)."""
    added = 0
    if isinstance(node, dict):
        actions = node.get("Action")
        if node.get("Effect") == "Allow" and actions is not None:
            listed = actions if isinstance(actions, list) else [actions]
            extra = [SQS_BATCH_ACTIONS[a] for a in listed
                     if a in SQS_BATCH_ACTIONS and SQS_BATCH_ACTIONS[a] not in listed]
            if extra:
                node["Action"] = listed + extra
                added += len(extra)
        for v in node.values():
            added += grant_batch_actions(v)
    elif isinstance(node, list):
        for v in node:
            added += grant_batch_actions(v)
    return added


def bootstrap_zip(binary_path: str) -> bytes:
    buf = io.BytesIO()
    info = zipfile.ZipInfo("bootstrap")
    info.external_attr = 0o755 << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    with open(binary_path, "rb") as f, zipfile.ZipFile(buf, "w") as z:
        z.writestr(info, f.read())
    return buf.getvalue()


# ---------------------------------------------------------------------------------- the stack

def wait_stack(cfn, stack: str, want: str, timeout: float) -> dict | None:
    """Polls until the stack's status is `want` (None when it is gone and `want` is DELETE_COMPLETE)."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            stacks = cfn.describe_stacks(StackName=stack)["Stacks"]
        except cfn.exceptions.ClientError as e:
            if want == "DELETE_COMPLETE" and "does not exist" in str(e):
                return None
            raise
        status = stacks[0]["StackStatus"] if stacks else "DELETE_COMPLETE"
        if status != last:
            log(f"stack {stack}: {status}")
            last = status
        if status == want:
            return stacks[0] if stacks else None
        if not status.endswith("_IN_PROGRESS"):
            events = cfn.describe_stack_events(StackName=stack).get("StackEvents", [])
            for e in events[:20]:
                if "FAILED" in e.get("ResourceStatus", ""):
                    log(f"  {e.get('LogicalResourceId')}: {e.get('ResourceStatus')}: "
                        f"{e.get('ResourceStatusReason', '')}")
            raise CheckFailed(f"stack {stack} ended {status}, not {want}")
        if time.monotonic() > deadline:
            raise CheckFailed(f"stack {stack} still {status} after {timeout:.0f} s")
        time.sleep(0.5)


NUMBERS = ("BatchSize", "MaximumBatchingWindowInSeconds")


def raw_mappings(lam, function: str) -> list[dict]:
    """ListEventSourceMappings as ministack sent it: boto3 turns "10" into 10 when it parses an
    integer field, which would hide the strings this script looks for."""
    raw = {}

    def keep(http_response, **_):
        raw["body"] = http_response.content

    lam.meta.events.register("after-call.lambda.ListEventSourceMappings", keep)
    try:
        lam.list_event_source_mappings(FunctionName=function)
    finally:
        lam.meta.events.unregister("after-call.lambda.ListEventSourceMappings", keep)
    return json.loads(raw["body"]).get("EventSourceMappings", [])


def strings_in(mapping: dict) -> dict:
    """The mapping's number fields that ministack holds as strings."""
    found = {k: mapping[k] for k in NUMBERS if isinstance(mapping.get(k), str)}
    concurrency = (mapping.get("ScalingConfig") or {}).get("MaximumConcurrency")
    if isinstance(concurrency, str):
        found["ScalingConfig.MaximumConcurrency"] = concurrency
    return found


def fix_event_source_mappings(lam, function: str) -> None:
    """ministack keeps the mapping's numbers as strings; send them again, same values, as numbers."""
    mappings = raw_mappings(lam, function)
    check(len(mappings) >= 1, f"function {function} has its event source mapping ({len(mappings)})")
    for m in mappings:
        found = strings_in(m)
        if not found:
            log(f"event source mapping {m['UUID']}: its numbers are numbers (no workaround needed)")
            continue
        note(f"event source mapping {m['UUID']} holds {json.dumps(found, sort_keys=True)} as strings, "
             f"and its poller fails comparing them to numbers: sending the same values as numbers "
             f"(UpdateEventSourceMapping)")
        update = {"UUID": m["UUID"]}
        for k in NUMBERS:
            if m.get(k) is not None:
                update[k] = int(m[k])
        concurrency = (m.get("ScalingConfig") or {}).get("MaximumConcurrency")
        if concurrency is not None:
            update["ScalingConfig"] = {"MaximumConcurrency": int(concurrency)}
        lam.update_event_source_mapping(**update)
    for m in raw_mappings(lam, function):
        check(not strings_in(m), f"event source mapping {m['UUID']}: BatchSize {m.get('BatchSize')!r}, "
                                 f"MaximumBatchingWindowInSeconds {m.get('MaximumBatchingWindowInSeconds')!r}, "
                                 f"ScalingConfig {m.get('ScalingConfig')!r}, "
                                 f"FunctionResponseTypes {m.get('FunctionResponseTypes')!r}")


# --------------------------------------------------------------------------------- the checks

def queue_depth(sqs, url: str) -> int:
    attrs = sqs.get_queue_attributes(
        QueueUrl=url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible",
                        "ApproximateNumberOfMessagesDelayed"],
    )["Attributes"]
    return sum(int(v) for v in attrs.values())


def wait_empty(sqs, url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        depth = queue_depth(sqs, url)
        if depth == 0:
            return
        if time.monotonic() > deadline:
            raise CheckFailed(f"the input queue still holds {depth} message(s) after {timeout:.0f} s")
        time.sleep(0.5)


def drain(sqs, url: str) -> list[dict]:
    got = []
    while True:
        out = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1,
                                  MessageAttributeNames=["All"], AttributeNames=["All"])
        msgs = out.get("Messages", [])
        if not msgs:
            return got
        got.extend(msgs)


def scan_balances(ddb, table: str) -> dict[str, int]:
    balances = {}
    kwargs = {"TableName": table, "ConsistentRead": True}
    while True:
        out = ddb.scan(**kwargs)
        for item in out.get("Items", []):
            balances[item["account"]["S"]] = int(item.get("balance", {}).get("N", "0"))
        if "LastEvaluatedKey" not in out:
            return balances
        kwargs["ExclusiveStartKey"] = out["LastEvaluatedKey"]


def attr(message: dict, name: str) -> str | None:
    a = (message.get("MessageAttributes") or {}).get(name)
    return a.get("StringValue") if a else None


def failure(message: dict) -> dict:
    """The failure the consumer's failure destination wrote: the JSON of `sqs-claim.failure`."""
    text = attr(message, "sqs-claim.failure")
    return json.loads(text) if text else {}


def feed_and_check(sqs, ddb, outputs: dict, wait: float) -> dict[str, int]:
    input_url = outputs["InputQueueUrl"]
    dlq_url = outputs["DeadLetterQueueUrl"]
    accounts = outputs["AccountsTableName"]
    run = uuid.uuid4().hex[:6]

    def pay(order: int, account: str, cents: int) -> str:
        return json.dumps({"order_id": f"dl-{run}-{order}", "account": account, "amount_cents": cents})

    payments = [pay(1, "acct-alice", 1250), pay(2, "acct-bob", 700), pay(3, "acct-alice", 300),
                pay(4, "acct-carol", 5), pay(5, "acct-bob", 45), pay(6, "acct-alice", 1)]
    expected = {"acct-alice": 1250 + 300 + 1, "acct-bob": 700 + 45, "acct-carol": 5}
    # Truncated JSON: the key (json:/order_id by default) cannot be read, the payment cannot be parsed.
    bad_body = '{"order_id": "dl-' + run + '-bad", "account": "acct-alice", "amount_cents": 10'
    # One batch: the six payments, three of them twice, and the bad body (10 entries, SQS's limit).
    bodies = payments + [payments[0], payments[2], payments[4], bad_body]
    entries = [{"Id": str(i), "MessageBody": b} for i, b in enumerate(bodies)]
    sent = sqs.send_message_batch(QueueUrl=input_url, Entries=entries)
    check(not sent.get("Failed"), f"SendMessageBatch took all {len(entries)} messages "
                                  f"(6 payments, 3 resent in the same batch, 1 body that does not parse)")
    bad_id = next(s["MessageId"] for s in sent["Successful"] if s["Id"] == str(len(bodies) - 1))

    t0 = time.monotonic()
    wait_empty(sqs, input_url, wait)
    log(f"the input queue is empty after {time.monotonic() - t0:.1f} s")
    # Resent later: duplicates across invocations, answered from the claims.
    sqs.send_message_batch(QueueUrl=input_url, Entries=[
        {"Id": "r1", "MessageBody": payments[1]}, {"Id": "r2", "MessageBody": payments[5]}])
    wait_empty(sqs, input_url, wait)
    log(f"two payments resent later: the input queue is empty again after {time.monotonic() - t0:.1f} s")

    balances = scan_balances(ddb, accounts)
    log(f"balances in {accounts}: {json.dumps(balances, sort_keys=True)}")
    check(balances == expected, f"each payment credited exactly once: {json.dumps(expected, sort_keys=True)}")

    dead = drain(sqs, dlq_url)
    for m in dead:
        attrs = {k: v.get("StringValue") for k, v in (m.get("MessageAttributes") or {}).items()}
        log(f"dead-letter queue: message {failure(m).get('message_id')}, attributes {json.dumps(attrs, sort_keys=True)}")
    check(len(dead) == 1, f"the dead-letter queue holds exactly one message (holds {len(dead)})")
    m = dead[0]
    check(m["Body"] == bad_body, "its body is the body that does not parse, unchanged")
    f = failure(m)
    check(f.get("message_id") == bad_id, f"sqs-claim.failure's message_id is the sent message's id ({bad_id})")
    kind = f.get("kind")
    check(kind in ("missing_key", "bad_body") or f.get("error_kind") == "bad_body",
          f"sqs-claim.failure's kind says the body could not be read ({kind!r}, error kind "
          f"{f.get('error_kind')!r})")
    reason = f.get("reason") or ""
    check("JSON" in reason, f"sqs-claim.failure's reason says why: {reason!r}")
    check(f.get("receive_count") == 1,
          "it was dead-lettered at once, on its first receive (DeadLetterAtOnce=default)")
    return expected


# ------------------------------------------------------------------------ the large message

POINTER_CLASS = "software.amazon.payloadoffloading.PayloadS3Pointer"


def pointer_body(bucket: str, key: str) -> str:
    """The body the extended clients (Java, Python) send in place of a payload they offloaded."""
    return json.dumps([POINTER_CLASS, {"s3BucketName": bucket, "s3Key": key}], separators=(",", ":"))


def set_mappings_enabled(lam, function: str, enabled: bool) -> None:
    for m in lam.list_event_source_mappings(FunctionName=function)["EventSourceMappings"]:
        lam.update_event_source_mapping(UUID=m["UUID"], Enabled=enabled)


def object_state(s3, bucket: str) -> dict[str, tuple]:
    return {o["Key"]: (o["ETag"], o["Size"], o["LastModified"])
            for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])}


def large_message_check(c: dict, outputs: dict, bucket: str, deletes: bool, expected: dict,
                        wait: float) -> None:
    """A payment over SQS's 256 KiB limit, offloaded to `bucket` as the extended clients do:
    read by the function under the event source mapping, credited once though sent twice, its
    object deleted after its completion (DeleteLargePayloads=true), nothing else touched."""
    sqs, ddb, lam, s3 = c["sqs"], c["ddb"], c["lam"], c["s3"]
    input_url = outputs["InputQueueUrl"]
    function = outputs["ConsumerFunctionName"]
    run = uuid.uuid4().hex[:6]
    # The key (json:/order_id) is in the object, not in the pointer: the function must read it.
    payload = json.dumps({"order_id": f"dl-{run}-large", "account": "acct-dave", "amount_cents": 4321,
                          "filler": "x" * (300 * 1024)}).encode()
    check(len(payload) > 256 * 1024, f"the large payment is over SQS's 256 KiB limit ({len(payload)} bytes)")
    paid, resent, bystander = (f"payloads/{run}-{what}" for what in ("paid", "resent", "bystander"))
    s3.put_object(Bucket=bucket, Key=paid, Body=payload)
    # A producer's resend through an extended client uploads the payload again under a key of its own.
    s3.put_object(Bucket=bucket, Key=resent, Body=payload)
    # An object no message points at.
    s3.put_object(Bucket=bucket, Key=bystander, Body=payload.replace(b"-large", b"-other"))
    before = object_state(s3, bucket)

    def entry(i: str, key: str) -> dict:
        return {"Id": i, "MessageBody": pointer_body(bucket, key), "MessageAttributes": {
            "ExtendedPayloadSize": {"DataType": "Number", "StringValue": str(len(payload))}}}

    # The pointer and a copy of it (the same message sent twice) in one batch of the event source
    # mapping: it is paused while both are sent, as ministack's poller may otherwise take the first
    # before the second is in the queue (and the copy would then come after the object went, which
    # a key read from the payload cannot tell from a new payment: docs/large-messages.md).
    set_mappings_enabled(lam, function, False)
    try:
        sent = sqs.send_message_batch(QueueUrl=input_url, Entries=[entry("p1", paid), entry("p2", paid)])
    finally:
        set_mappings_enabled(lam, function, True)
    check(not sent.get("Failed"), f"SendMessageBatch took the pointer to s3://{bucket}/{paid} "
                                  f"(ExtendedPayloadSize {len(payload)}) and a copy of it")
    t0 = time.monotonic()
    wait_empty(sqs, input_url, wait)
    log(f"the input queue is empty after {time.monotonic() - t0:.1f} s")
    want = dict(expected, **{"acct-dave": 4321})
    balances = scan_balances(ddb, outputs["AccountsTableName"])
    log(f"balances: {json.dumps(balances, sort_keys=True)}")
    check(balances == want, "the large payment, read from S3 under the event source mapping, credited "
                            f"once though sent twice: {json.dumps(want, sort_keys=True)}")
    # Later, the resend with its own object: a duplicate across invocations.
    sqs.send_message_batch(QueueUrl=input_url, Entries=[entry("r1", resent)])
    wait_empty(sqs, input_url, wait)
    log(f"the payment resent with an object of its own: the input queue is empty again after "
        f"{time.monotonic() - t0:.1f} s")

    balances = scan_balances(ddb, outputs["AccountsTableName"])
    log(f"balances: {json.dumps(balances, sort_keys=True)}")
    check(balances == want, f"the resend is a duplicate, not credited again: {json.dumps(want, sort_keys=True)}")
    after = object_state(s3, bucket)
    if deletes:
        check(paid not in after, f"s3://{bucket}/{paid}, the completed payment's object, is deleted "
                                 "(DeleteLargePayloads=true)")
        check(resent not in after, f"s3://{bucket}/{resent}, the skipped resend's own object, is deleted "
                                   "too (DeleteLargePayloads=true)")
    else:
        check(after.get(paid) == before[paid], f"s3://{bucket}/{paid} is kept (DeleteLargePayloads=false)")
        check(after.get(resent) == before[resent],
              f"s3://{bucket}/{resent}, the skipped resend's object, is kept (DeleteLargePayloads=false)")
    others = {k: v for k, v in before.items() if k not in (paid, resent)}
    check({k: v for k, v in after.items() if k not in (paid, resent)} == others,
          f"every other object is untouched: {', '.join(sorted(others))} (one no message points at)")
    dead = drain(sqs, outputs["DeadLetterQueueUrl"])
    for m in dead:
        attrs = {k: v.get("StringValue") for k, v in (m.get("MessageAttributes") or {}).items()}
        log(f"dead-letter queue: attributes {json.dumps(attrs, sort_keys=True)}")
    check(not dead, f"nothing of it went to the dead-letter queue (holds {len(dead)})")


# ----------------------------------------------------------------------------------- streams

def count_completed_claims(ddb, table: str, prefix: str) -> int:
    """Claims of the namespace `prefix` whose status is COMPLETED."""
    n = 0
    kwargs = {"TableName": table, "ConsistentRead": True}
    while True:
        out = ddb.scan(**kwargs)
        n += sum(1 for i in out.get("Items", [])
                 if i.get("id", {}).get("S", "").startswith(prefix + "#")
                 and i.get("status", {}).get("S") == "COMPLETED")
        if "LastEvaluatedKey" not in out:
            return n
        kwargs["ExclusiveStartKey"] = out["LastEvaluatedKey"]


def wait_balances(ddb, table: str, want: dict, wait: float, what: str) -> None:
    """Waits until the balances are `want` (each feed ends with a fresh payment after the
    records it checks, on the same shard, so reaching `want` means those were delivered), then
    checks they stay so (a credit applied twice would show within a few polls)."""
    t0 = time.monotonic()
    while True:
        balances = scan_balances(ddb, table)
        if balances == want:
            break
        if any(balances.get(a, 0) > v for a, v in want.items()) or time.monotonic() - t0 > wait:
            raise CheckFailed(f"{what}: balances {json.dumps(balances, sort_keys=True)}, want "
                              f"{json.dumps(want, sort_keys=True)} (after {time.monotonic() - t0:.1f} s)")
        time.sleep(0.5)
    log(f"{what}: delivered in {time.monotonic() - t0:.1f} s")
    time.sleep(2)
    balances = scan_balances(ddb, table)
    check(balances == want, f"{what}: each record credited once, and it stays so: "
                            f"{json.dumps(want, sort_keys=True)}")


def streams_stack_check(c: dict, outputs: dict, wait: float) -> None:
    """The stream functions as deployed, their mappings, then the feed (streams_check)."""
    missing = [k for k in ("ClaimsTableName", "AccountsTableName", "KinesisStreamName", "OrdersTableName",
                           "KinesisConsumerName", "DynamoDbConsumerName") if k not in outputs]
    check(not missing, "the stack's outputs name the tables, the stream and the two functions"
                       + (f" (missing {missing})" if missing else ""))
    for output, source in (("KinesisConsumerName", "kinesis"), ("DynamoDbConsumerName", "dynamodb")):
        fn = c["lam"].get_function_configuration(FunctionName=outputs[output])
        env = (fn.get("Environment") or {}).get("Variables", {})
        check(fn.get("Runtime") == "provided.al2023" and fn.get("Handler") == "bootstrap"
              and env.get("STREAM_SOURCE") == source
              and env.get("CLAIMS_TABLE") == outputs["ClaimsTableName"]
              and env.get("ACCOUNTS_TABLE") == outputs["AccountsTableName"],
              f"function {fn['FunctionName']}: {fn.get('Runtime')}, STREAM_SOURCE={source}, the "
              f"stack's claims and accounts tables, NAMESPACE={env.get('NAMESPACE')}")
        fix_event_source_mappings(c["lam"], outputs[output])
        for m in c["lam"].list_event_source_mappings(FunctionName=outputs[output])["EventSourceMappings"]:
            log(f"  mapping {m['UUID']}: {m.get('EventSourceArn')}, StartingPosition "
                f"{m.get('StartingPosition')}, FunctionResponseTypes {m.get('FunctionResponseTypes')}, "
                f"FilterCriteria {json.dumps(m.get('FilterCriteria'))}")
    streams_check(c, outputs, wait)


def streams_check(c: dict, outputs: dict, wait: float) -> None:
    """Feeds the Kinesis stream and the orders table through ministack's stream mappings."""
    ddb, kinesis = c["ddb"], c["kinesis"]
    accounts, claims = outputs["AccountsTableName"], outputs["ClaimsTableName"]
    stream, orders = outputs["KinesisStreamName"], outputs["OrdersTableName"]
    run = uuid.uuid4().hex[:6]

    def pay(order: str, account: str, cents: int) -> dict:
        return {"order_id": f"st-{run}-{order}", "account": account, "amount_cents": cents}

    # Kinesis: six payments, two of them written twice by the producer (records of their own,
    # the same order), in two calls. One partition key: one shard, in order, so the last
    # payment's credit says the records before it were delivered.
    k = [pay("k1", "acct-alice", 1250), pay("k2", "acct-bob", 700), pay("k3", "acct-alice", 300),
         pay("k4", "acct-carol", 5), pay("k5", "acct-bob", 45), pay("k6", "acct-alice", 1)]
    want = {"acct-alice": 1250 + 300 + 1, "acct-bob": 700 + 45, "acct-carol": 5}

    def put(payments: list[dict]) -> None:
        out = kinesis.put_records(StreamName=stream, Records=[
            {"Data": json.dumps(p).encode(), "PartitionKey": run} for p in payments])
        check(not out.get("FailedRecordCount"), f"PutRecords took {len(payments)} records")

    put(k[:4] + [k[0]])
    put([k[2], k[4], k[5]])
    wait_balances(ddb, accounts, want, wait,
                  "Kinesis: 6 payments, 2 of them written twice by the producer")
    # The same payments again, later (a producer resending, a stream read again), then a new one.
    put(k + [pay("k7", "acct-frank", 70)])
    want["acct-frank"] = 70
    wait_balances(ddb, accounts, want, wait, "Kinesis: the 6 payments written again later, then a 7th")
    check(count_completed_claims(ddb, claims, "orders-kinesis") == len(k) + 1,
          f"{len(k) + 1} claims completed in namespace orders-kinesis (one per order)")

    # DynamoDB Streams: four new orders (INSERTs), then an update of one and a delete of another,
    # then a fifth order.
    d = [pay("d1", "acct-dave", 400), pay("d2", "acct-erin", 30), pay("d3", "acct-dave", 2),
         pay("d4", "acct-erin", 9), pay("d5", "acct-gina", 8)]

    def insert(i: int) -> None:
        p = d[i]
        ddb.put_item(TableName=orders, Item={
            "id": {"S": f"{run}-{i}"}, "order_id": {"S": p["order_id"]},
            "account": {"S": p["account"]}, "amount_cents": {"N": str(p["amount_cents"])}})

    for i in range(4):
        insert(i)
    want.update({"acct-dave": 400 + 2, "acct-erin": 30 + 9})
    wait_balances(ddb, accounts, want, wait, "DynamoDB Streams: 4 new orders (INSERT)")
    ddb.update_item(TableName=orders, Key={"id": {"S": f"{run}-0"}},
                    UpdateExpression="SET amount_cents = :a", ExpressionAttributeValues={":a": {"N": "999"}})
    ddb.delete_item(TableName=orders, Key={"id": {"S": f"{run}-1"}})
    insert(4)
    want["acct-gina"] = 8
    wait_balances(ddb, accounts, want, wait, "DynamoDB Streams: an order updated (MODIFY) and one "
                                             "deleted (REMOVE) credit nothing; a 5th order is credited")
    check(count_completed_claims(ddb, claims, "orders-table-stream") == len(d),
          f"{len(d)} claims completed in namespace orders-table-stream (one per order)")
    note("its Kinesis and DynamoDB Streams mappings go on past every batch whatever the partial "
         "batch response says, and it has no Kafka poller: checked is what they deliver, each "
         "record credited once (the checkpoint rules are tests/suite/test_streams.rs's, on the test "
         "kit's stand-in)")


# ------------------------------------------------------------------------------ the clean-up

def leftovers(session_clients: dict, stack: str, buckets: list[str]) -> list[str]:
    """Anything still named after the stack (ministack names resources `<stack>-<logical>-...`)."""
    sqs, ddb, lam, s3, cfn, logs = (session_clients[k] for k in ("sqs", "ddb", "lam", "s3", "cfn", "logs"))
    left = []
    left += [f"queue {u}" for u in sqs.list_queues(QueueNamePrefix=stack).get("QueueUrls", [])]
    left += [f"table {t}" for t in ddb.list_tables().get("TableNames", []) if t.startswith(stack)]
    left += [f"function {f['FunctionName']}" for f in lam.list_functions().get("Functions", [])
             if f["FunctionName"].startswith(stack)]
    left += [f"bucket {b['Name']}" for b in s3.list_buckets().get("Buckets", [])
             if b["Name"] in buckets or b["Name"].startswith(stack.lower())]
    left += [f"log group {g['logGroupName']}" for g in
             logs.describe_log_groups().get("logGroups", []) if stack in g["logGroupName"]]
    if "kinesis" in session_clients:
        left += [f"stream {n}" for n in
                 session_clients["kinesis"].list_streams().get("StreamNames", []) if n.startswith(stack)]
    left += [f"stack {s['StackName']} ({s['StackStatus']})" for s in
             cfn.list_stacks().get("StackSummaries", [])
             if s["StackName"] == stack and s["StackStatus"] != "DELETE_COMPLETE"]
    return left


def empty_and_delete_bucket(s3, bucket: str) -> None:
    while True:
        objects = s3.list_objects_v2(Bucket=bucket).get("Contents", [])
        if not objects:
            break
        for o in objects:
            s3.delete_object(Bucket=bucket, Key=o["Key"])
    s3.delete_bucket(Bucket=bucket)


def clean_up(c: dict, stack: str, buckets: list[str], template: dict, created: bool) -> bool:
    ok = True
    if created:
        retained = []
        functions = []
        try:
            for r in c["cfn"].list_stack_resources(StackName=stack)["StackResourceSummaries"]:
                if r["ResourceType"] == "AWS::Lambda::Function" and r.get("PhysicalResourceId"):
                    functions.append(r["PhysicalResourceId"])
                policy = template["Resources"].get(r["LogicalResourceId"], {}).get("DeletionPolicy")
                if policy in ("Retain", "RetainExceptOnCreate") and r.get("PhysicalResourceId"):
                    retained.append((r["ResourceType"], r["PhysicalResourceId"]))
        except Exception as e:  # noqa: BLE001 - the stack may not exist at all
            log(f"clean-up: cannot list the stack's resources ({e})")
        for function in functions:
            # ministack's DeleteStack drops the function without stopping its warm bootstrap
            # process (its DeleteFunction stops it): delete the function first. CloudFormation
            # treats a resource already gone as deleted.
            try:
                c["lam"].delete_function(FunctionName=function)
                note(f"DeleteStack leaves the function's warm bootstrap process running: deleted "
                     f"{function} with DeleteFunction first, which stops it")
            except Exception as e:  # noqa: BLE001
                log(f"clean-up: DeleteFunction {function}: {e}")
            # A function without a log group of the template's writes to the one Lambda makes,
            # /aws/lambda/<function>: the stack does not own it (on AWS either); delete it.
            group = f"/aws/lambda/{function}"
            try:
                if c["logs"].describe_log_groups(logGroupNamePrefix=group).get("logGroups"):
                    c["logs"].delete_log_group(logGroupName=group)
                    log(f"deleted log group {group} (Lambda's own: DeleteStack keeps it, as on AWS)")
            except Exception as e:  # noqa: BLE001
                log(f"clean-up: log group {group}: {e}")
        try:
            c["cfn"].delete_stack(StackName=stack)
            wait_stack(c["cfn"], stack, "DELETE_COMPLETE", 120)
            log(f"stack {stack} deleted")
        except Exception as e:  # noqa: BLE001
            log(f"clean-up: ERROR deleting stack {stack}: {e}")
            ok = False
        for rtype, physical in retained:
            try:
                if rtype == "AWS::DynamoDB::Table":
                    try:
                        c["ddb"].delete_table(TableName=physical)
                        log(f"deleted {physical} (DeletionPolicy: Retain keeps it after DeleteStack, as on AWS)")
                    except c["ddb"].exceptions.ResourceNotFoundException:
                        note(f"{physical} is gone after DeleteStack although its DeletionPolicy is Retain")
                elif rtype == "AWS::S3::Bucket":
                    empty_and_delete_bucket(c["s3"], physical)
                    log(f"deleted bucket {physical} (DeletionPolicy: Retain keeps it after DeleteStack, as on AWS)")
                else:
                    log(f"clean-up: ERROR: retained {rtype} {physical}: this script cannot delete it")
                    ok = False
            except Exception as e:  # noqa: BLE001
                log(f"clean-up: ERROR deleting retained {rtype} {physical}: {e}")
                ok = False
    for bucket in buckets:
        try:
            empty_and_delete_bucket(c["s3"], bucket)
        except Exception as e:  # noqa: BLE001
            if "NoSuchBucket" not in str(e):
                log(f"clean-up: ERROR deleting bucket {bucket}: {e}")
                ok = False
    try:
        left = leftovers(c, stack, buckets)
    except Exception as e:  # noqa: BLE001
        left = [f"(cannot list: {e})"]
    if left:
        log("clean-up: ERROR: left behind: " + "; ".join(left))
        ok = False
    else:
        log(f"clean-up: nothing named {stack}, {' or '.join(buckets)} is left")
    return ok


# ----------------------------------------------------------------------------------- the run

def on_sigterm(*_) -> None:
    raise KeyboardInterrupt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--endpoint", required=True, help="ministack, e.g. http://127.0.0.1:4566")
    ap.add_argument("--template", required=True)
    ap.add_argument("--binary", required=True, help="the consumer, built for this host")
    ap.add_argument("--binary-name", default="consumer")
    ap.add_argument("--stack", required=True)
    ap.add_argument("--parameter", action="append", default=[], metavar="KEY=VALUE",
                    help="a parameter override (by default only LargePayloadBucket and DeleteLargePayloads are set)")
    ap.add_argument("--wait", type=float, default=120, help="seconds to wait for the queue to empty")
    ap.add_argument("--streams", action="store_true",
                    help="the template is examples/streams/template.yaml: feed its stream and table")
    args = ap.parse_args()

    # SIGTERM (a CI timeout, `kill`) unwinds like Ctrl-C, through the clean-up below.
    signal.signal(signal.SIGTERM, on_sigterm)

    cfg = botocore.config.Config(retries={"max_attempts": 3}, connect_timeout=5, read_timeout=60)
    session = boto3.session.Session(aws_access_key_id="test", aws_secret_access_key="test",
                                    region_name=REGION)

    def client(name: str):
        return session.client(name, endpoint_url=args.endpoint, config=cfg)

    c = {"sqs": client("sqs"), "ddb": client("dynamodb"), "lam": client("lambda"),
         "s3": client("s3"), "cfn": client("cloudformation"), "logs": client("logs"),
         "kinesis": client("kinesis")}
    stack = args.stack
    bucket = f"{stack}-code"
    # The large payloads' bucket, of its own (the template's LargePayloadBucket pattern: lower case).
    payloads = f"{stack.lower()[:54].rstrip('-.')}-payloads"
    key = f"{args.binary_name}.zip"

    template = load_template(args.template)
    params = {}
    for p in args.parameter:
        k, sep, v = p.partition("=")
        if not sep:
            raise SystemExit(f"deploy-local: --parameter {p!r} is not KEY=VALUE")
        params[k] = v
    # Large messages: LargePayloadBucket names the bucket this script makes, and the function
    # deletes each object once its payment completed, unless --parameter says otherwise.
    large = "LargePayloadBucket" in (template.get("Parameters") or {}) and "LargePayloadBucket" not in params
    if large:
        params["LargePayloadBucket"] = payloads
        if "DeleteLargePayloads" in (template.get("Parameters") or {}):
            params.setdefault("DeleteLargePayloads", "true")
    elif not args.streams:
        log("large messages: not checked (LargePayloadBucket given as a parameter, or not in the template)")
    deletes = params.get("DeleteLargePayloads") == "true"
    unknown = sorted(set(params) - set(template.get("Parameters") or {}))
    if unknown:
        raise SystemExit(f"deploy-local: the template has no parameter {', '.join(unknown)}")
    defaults = {k: v.get("Default") for k, v in (template.get("Parameters") or {}).items()}
    log(f"template {args.template}: {len(template['Resources'])} resources, "
        f"{len(defaults)} parameters, overrides {params or 'none (the defaults)'}")
    pointed = point_code_at(template, bucket, key, args.binary_name)
    if "!Contains" in open(args.template, encoding="utf-8").read():
        note("its YAML reader refuses !Contains: sending the template as JSON with Fn:: long forms")
    roles = {k: r for k, r in template["Resources"].items()
             if r.get("Type") in ("AWS::IAM::Role", "AWS::IAM::Policy", "AWS::IAM::ManagedPolicy")}
    added = grant_batch_actions(roles)
    if added:
        note(f"its IAM evaluator (when it enforces IAM, AUTH=true) authorizes SQS batch calls by "
             f"the batch action's own name, AWS by the single action's: {added} batch action(s) "
             f"added beside the single ones the template grants")
    body = json.dumps(template)

    t0 = time.monotonic()
    created = False
    ok = False
    try:
        zipped = bootstrap_zip(args.binary)
        c["s3"].create_bucket(Bucket=bucket)
        c["s3"].put_object(Bucket=bucket, Key=key, Body=zipped)
        if large:
            c["s3"].create_bucket(Bucket=payloads)
        log(f"uploaded {args.binary_name} as bootstrap ({len(zipped) / 1e6:.1f} MB zip) to "
            f"s3://{bucket}/{key}; CodeUri of {', '.join(pointed)} points there")
        created = True  # from here on the clean-up deletes the stack, even if CreateStack fails
        c["cfn"].create_stack(
            StackName=stack, TemplateBody=body,
            Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in params.items()],
            Capabilities=["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"],
        )
        desc = wait_stack(c["cfn"], stack, "CREATE_COMPLETE", 180)
        outputs = {o["OutputKey"]: o["OutputValue"] for o in desc.get("Outputs", [])}
        log(f"created in {time.monotonic() - t0:.1f} s; outputs: {json.dumps(outputs, sort_keys=True)}")
        resources = c["cfn"].list_stack_resources(StackName=stack)["StackResourceSummaries"]
        log("resources: " + ", ".join(f"{r['LogicalResourceId']} ({r['ResourceType']})" for r in resources))
        if args.streams:
            streams_stack_check(c, outputs, args.wait)
        else:
            missing = [k for k in ("InputQueueUrl", "DeadLetterQueueUrl", "AccountsTableName",
                                   "ConsumerFunctionName") if k not in outputs]
            check(not missing, f"the stack's outputs name the input queue, DLQ, accounts table and function"
                               + (f" (missing {missing})" if missing else ""))
            fn = c["lam"].get_function_configuration(FunctionName=outputs["ConsumerFunctionName"])
            env = (fn.get("Environment") or {}).get("Variables", {})
            check(fn.get("Runtime") == "provided.al2023" and fn.get("Handler") == "bootstrap",
                  f"function {fn['FunctionName']}: {fn.get('Runtime')}, handler {fn.get('Handler')}, "
                  f"timeout {fn.get('Timeout')} s, memory {fn.get('MemorySize')} MB")
            check(env.get("SQS_CLAIM_FAILURE_QUEUE_URL") == outputs["DeadLetterQueueUrl"]
                  and env.get("SQS_CLAIM_ACCOUNTS_TABLE") == outputs["AccountsTableName"],
                  "its environment names the stack's DLQ as failure queue and the stack's accounts table")
            fix_event_source_mappings(c["lam"], outputs["ConsumerFunctionName"])
            expected = feed_and_check(c["sqs"], c["ddb"], outputs, args.wait)
            if large:
                log(f"large messages: function environment "
                    + json.dumps({k: v for k, v in env.items() if "LARGE" in k or "OFFLOAD" in k}, sort_keys=True))
                large_message_check(c, outputs, payloads, deletes, expected, args.wait)
        ok = True
    except CheckFailed as e:
        log(f"FAILED: {e}")
    except botocore.exceptions.ClientError as e:
        log(f"FAILED: {e}")
    except KeyboardInterrupt:
        log("interrupted")
    finally:
        # A second TERM (or Ctrl-C, which the shell script passes on as TERM) must not cut the
        # clean-up short and leave the stack behind.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        cleaned = clean_up(c, stack, [bucket] + ([payloads] if large else []), template, created)
    elapsed = time.monotonic() - t0
    if ok and cleaned:
        log(f"PASSED in {elapsed:.1f} s (deploy, feed, checks, delete)")
        return 0
    log(f"FAILED after {elapsed:.1f} s" + ("" if cleaned else " (and the clean-up failed)"))
    return 1


if __name__ == "__main__":
    sys.exit(main())
