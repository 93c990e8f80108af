"""A Powertools-Python app as a user would deploy it (module `app`), driven by driver.py.

Its handlers are module-level functions decorated at import, as in a real Lambda, so their
idempotency keys carry the real `{AWS_LAMBDA_FUNCTION_NAME}.app.<function>` prefix. What a real
app would hard-code comes from the environment, which driver.py sets before importing it:

  PT_TABLE             the DynamoDB table
  PT_EVENT_KEY         event_key_jmespath of lambda_handler (API Gateway style)
  PT_RECORD_KEY        event_key_jmespath of record_handler (SQS batch records)
  PT_VALIDATION        payload_validation_jmespath of both (empty: no validation)
  PT_SORT_KEY_ATTR     DynamoDBPersistenceLayer(sort_key_attr=...) (empty: none)
  PT_CRASH             "1": the handler body exits the process, leaving its INPROGRESS record
  SQS_CLAIM_DYNAMODB_ENDPOINT  DynamoDB Local
"""

import json
import os

import boto3

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent,
    idempotent_function,
)

RAN = []


def _client():
    return boto3.client(
        "dynamodb",
        endpoint_url=os.environ["SQS_CLAIM_DYNAMODB_ENDPOINT"],
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )


def _persistence():
    return DynamoDBPersistenceLayer(
        table_name=os.environ["PT_TABLE"],
        sort_key_attr=os.environ.get("PT_SORT_KEY_ATTR") or None,
        boto3_client=_client(),
    )


def _crash_if_asked():
    if os.environ.get("PT_CRASH") == "1":
        # A crash (or a Lambda timeout) mid-handler: nothing deletes or completes the record.
        print(json.dumps({"crashed": True}), flush=True)
        os._exit(17)


api_config = IdempotencyConfig(
    event_key_jmespath=os.environ.get("PT_EVENT_KEY", ""),
    payload_validation_jmespath=os.environ.get("PT_VALIDATION", ""),
)


@idempotent(config=api_config, persistence_store=_persistence())
def lambda_handler(event, context):
    RAN.append(True)
    _crash_if_asked()
    return {"statusCode": 200, "body": json.dumps({"echo": event.get("body")})}


record_config = IdempotencyConfig(
    event_key_jmespath=os.environ.get("PT_RECORD_KEY", "messageId"),
    payload_validation_jmespath=os.environ.get("PT_VALIDATION", ""),
)
processor = BatchProcessor(event_type=EventType.SQS)


@idempotent_function(data_keyword_argument="record", config=record_config, persistence_store=_persistence())
def record_handler(record: SQSRecord):
    RAN.append(record.message_id)
    _crash_if_asked()
    if record.body == "fail":
        raise ValueError("asked to fail")
    return {"processed": record.message_id}


def sqs_handler(event, context):
    # As Powertools documents it for batches: the record handler gets the Lambda context
    # through its config, to set in_progress_expiration.
    record_config.register_lambda_context(context)
    return process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )
