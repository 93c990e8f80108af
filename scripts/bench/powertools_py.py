"""Powertools for AWS Lambda (Python) side of `make bench`: BatchProcessor + idempotency
(DynamoDBPersistenceLayer) with their defaults, on the batches compare.py hands it.

Protocol (the same for every worker): read the event file, create the table, run the warm-up
batch, print "ready", wait for a line on stdin, process every timed batch, print one JSON line
with the wall time of each batch and the CPU (user+sys) the process spent on them.
Run by compare.py with .bench/venv/bin/python (never the system Python).
"""

import argparse
import json
import os
import resource
import sys
import time

import boto3
from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)


class Context:
    """The part of the Lambda context Powertools reads."""

    function_name = "bench"
    aws_request_id = "bench"

    @staticmethod
    def get_remaining_time_in_millis():
        return 900_000


def cpu_seconds():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def peak_rss_kib():
    """The peak resident set in KiB (VmHWM: getrusage's maxrss keeps the forking parent's mark)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", required=True)
    ap.add_argument("--table", required=True)
    args = ap.parse_args()
    with open(args.events) as f:
        data = json.load(f)

    client = boto3.client(
        "dynamodb",
        endpoint_url=os.environ.get("AWS_ENDPOINT_URL_DYNAMODB"),
        region_name=os.environ.get("AWS_REGION", "us-east-1"),
    )
    try:
        client.create_table(
            TableName=args.table,
            AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
            BillingMode="PAY_PER_REQUEST",
        )
    except client.exceptions.ResourceInUseException:
        pass

    persistence = DynamoDBPersistenceLayer(table_name=args.table, boto3_client=client)
    # The same key as sqs-claim's KeySource::JsonPointer("/order_id"): the body's order id.
    config = IdempotencyConfig(event_key_jmespath="powertools_json(body).order_id")
    processor = BatchProcessor(event_type=EventType.SQS)

    @idempotent_function(data_keyword_argument="record", config=config, persistence_store=persistence)
    def record_handler(record):
        # The trivial handler every implementation runs: parse the body, nothing else.
        json.loads(record.body)

    context = Context()

    def handler(event):
        config.register_lambda_context(context)
        return process_partial_response(
            event=event, record_handler=record_handler, processor=processor, context=context
        )

    handler(data["warmup"])
    print("ready", flush=True)
    sys.stdin.readline()

    walls = []
    failed = 0
    cpu0 = cpu_seconds()
    for event in data["batches"]:
        t0 = time.perf_counter()
        response = handler(event)
        walls.append(time.perf_counter() - t0)
        failed += len(response["batchItemFailures"])
    cpu = cpu_seconds() - cpu0
    total = sum(len(e["Records"]) for e in data["batches"])
    # Powertools does not tell a duplicate from a fresh success: both are "not failed".
    result = {"walls": walls, "cpu": cpu, "ok": total - failed, "failed": failed, "vmhwm_kib": peak_rss_kib()}
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
