"""The peer of the large-message tests: Python's `amazon-sqs-extended-client` itself, on
ministack (AWS_ENDPOINT_URL). Run with the venv `scripts/sqs-extended/venv.sh` prints.

  peer.py send QUEUE_URL BUCKET ORDER_ID ACCOUNT AMOUNT SIZE [legacy]
      sends one payment padded to SIZE bytes through the extended client (offloaded to BUCKET
      when over 256 KiB); prints {"message_id": ..., "bytes": ...}
  peer.py receive QUEUE_URL BUCKET [COUNT]
      receives up to COUNT messages through the extended client (which fetches offloaded
      bodies from S3), deletes them, prints [{"body_len", "order_id", "sha256", "attributes"}]
"""
import hashlib
import json
import sys
import time

import boto3
import sqs_extended_client  # noqa: F401  (patches boto3's Session)


def client(bucket):
    sqs = boto3.client("sqs")
    sqs.large_payload_support = bucket
    return sqs


def send(queue_url, bucket, order_id, account, amount, size, legacy=False):
    sqs = client(bucket)
    sqs.use_legacy_attribute = legacy
    payment = {"order_id": order_id, "account": account, "amount_cents": int(amount), "pad": ""}
    base = len(json.dumps(payment))
    payment["pad"] = "x" * max(0, int(size) - base)
    body = json.dumps(payment)
    out = sqs.send_message(QueueUrl=queue_url, MessageBody=body)
    print(json.dumps({"message_id": out["MessageId"], "bytes": len(body.encode())}))


def receive(queue_url, bucket, count=1):
    sqs = client(bucket)
    got = []
    deadline = time.time() + 20
    while len(got) < int(count) and time.time() < deadline:
        out = sqs.receive_message(
            QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=1,
            MessageAttributeNames=["All"],
        )
        for m in out.get("Messages", []):
            body = m["Body"]
            try:
                order_id = json.loads(body).get("order_id")
            except ValueError:
                order_id = None
            got.append({
                "body_len": len(body.encode()),
                "order_id": order_id,
                "sha256": hashlib.sha256(body.encode()).hexdigest(),
                "attributes": sorted(m.get("MessageAttributes", {}).keys()),
            })
            # The client embeds the object in the receipt handle and takes the original back
            # with `split('-')[-1]`, which breaks on ministack's handles (they contain '-'):
            # the original is what follows the key's marker.
            handle = m["ReceiptHandle"]
            if "-..s3Key..-" in handle:
                handle = handle.rsplit("-..s3Key..-", 1)[1]
            sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=handle)
    print(json.dumps(got))


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "send":
        send(*args[:6], legacy=(len(args) > 6 and args[6] == "legacy"))
    elif cmd == "receive":
        receive(*args)
    else:
        sys.exit(f"unknown command {cmd}")
