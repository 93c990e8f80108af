"""Runs Powertools for AWS Lambda (Python) for tests/suite/test_powertools.rs. Prints one JSON document.

  driver.py hash [--jmespath EXPR] [--hash-function md5] [--handler app.lambda_handler]
                 [--key-prefix P]  < JSON array of JSON texts
      For each text: {"key": the idempotency key Powertools derives (null if it counts as
      missing), "dumps": the exact text it hashes, "hash": the hash of the whole value (the
      `validation` hash of payload_validation_jmespath="@")}. Powertools' own functions compute
      all three: its persistence layer's key derivation, with the hashed bytes recorded.

  driver.py apigw --table T --event FILE [--key EXPR] [--validation EXPR] [--crash]
                  [--remaining-ms N]
      Runs app.lambda_handler (@idempotent, event_key_jmespath default
      'headers."Idempotency-Key"') on the event. {"ran": did its body run, "response": what it
      returned, "error": the exception's class name or null}.

  driver.py sqs-record --table T --event FILE [--key EXPR] [--validation EXPR] [--crash]
                       [--remaining-ms N]
      Runs the SQS batch through app.sqs_handler (BatchProcessor + @idempotent_function record
      handler, event_key_jmespath default 'messageId'). {"ran": message ids whose body ran,
      "response": the partial batch response}.

AWS_LAMBDA_FUNCTION_NAME is read by Powertools as in Lambda; the tests set it.
"""

import argparse
import json
import os
import sys
import warnings

warnings.simplefilter("ignore")


class FakeContext:
    """The parts of the Lambda context Powertools reads."""

    def __init__(self, remaining_ms):
        self.remaining_ms = remaining_ms
        self.function_name = os.environ.get("AWS_LAMBDA_FUNCTION_NAME", "test-func")
        self.memory_limit_in_mb = 128
        self.invoked_function_arn = f"arn:aws:lambda:us-east-1:000000000000:function:{self.function_name}"
        self.aws_request_id = "00000000-0000-0000-0000-000000000000"

    def get_remaining_time_in_millis(self):
        return self.remaining_ms


def cmd_hash(args):
    from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig
    from aws_lambda_powertools.utilities.idempotency.persistence.base import BasePersistenceLayer

    class Probe(BasePersistenceLayer):
        def _get_record(self, idempotency_key):
            raise NotImplementedError

        def _put_record(self, data_record):
            raise NotImplementedError

        def _update_record(self, data_record):
            raise NotImplementedError

        def _delete_record(self, data_record):
            raise NotImplementedError

    layer = Probe()
    layer.configure(
        IdempotencyConfig(event_key_jmespath=args.jmespath, hash_function=args.hash_function),
        function_name=args.handler,
        key_prefix=args.key_prefix,
    )
    real = layer.hash_function
    seen = []

    def recording(data):
        seen.append(data)
        return real(data)

    layer.hash_function = recording
    out = []
    for text in json.load(sys.stdin):
        data = json.loads(text)
        seen.clear()
        key = layer._get_hashed_idempotency_key(data=data)
        dumps = seen[-1].decode() if seen else None
        out.append({"key": key, "dumps": dumps, "hash": layer._generate_hash(data=data)})
    print(json.dumps(out))


def _setup_env(args, key_var, default_key):
    os.environ["PT_TABLE"] = args.table
    os.environ[key_var] = args.key if args.key is not None else default_key
    os.environ["PT_VALIDATION"] = args.validation or ""
    os.environ["PT_SORT_KEY_ATTR"] = args.sort_key_attr or ""
    os.environ["PT_CRASH"] = "1" if args.crash else ""


def cmd_apigw(args):
    _setup_env(args, "PT_EVENT_KEY", 'headers."Idempotency-Key"')
    import app

    with open(args.event) as f:
        event = json.load(f)
    response, error = None, None
    try:
        response = app.lambda_handler(event, FakeContext(args.remaining_ms))
    except Exception as e:  # the test reads which one
        error = type(e).__name__
    print(json.dumps({"ran": bool(app.RAN), "response": response, "error": error}))


def cmd_sqs_record(args):
    _setup_env(args, "PT_RECORD_KEY", "messageId")
    import app

    with open(args.event) as f:
        event = json.load(f)
    response, error = None, None
    try:
        response = app.sqs_handler(event, FakeContext(args.remaining_ms))
    except Exception as e:
        error = type(e).__name__
    print(json.dumps({"ran": app.RAN, "response": response, "error": error}))


def main():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="cmd", required=True)
    h = sub.add_parser("hash")
    h.add_argument("--jmespath", default="")
    h.add_argument("--hash-function", default="md5")
    h.add_argument("--handler", default="app.lambda_handler")
    h.add_argument("--key-prefix", default=None)
    for name in ("apigw", "sqs-record"):
        p = sub.add_parser(name)
        p.add_argument("--table", required=True)
        p.add_argument("--event", required=True)
        p.add_argument("--key", default=None)
        p.add_argument("--validation", default=None)
        p.add_argument("--sort-key-attr", default=None)
        p.add_argument("--crash", action="store_true")
        p.add_argument("--remaining-ms", type=int, default=60_000)
    args = parser.parse_args()
    {"hash": cmd_hash, "apigw": cmd_apigw, "sqs-record": cmd_sqs_record}[args.cmd](args)


if __name__ == "__main__":
    main()
