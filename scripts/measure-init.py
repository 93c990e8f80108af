#!/usr/bin/env python3
"""Lambda init of the `consumer` binary against a bare `lambda_runtime` function, in the same run:
from exec to the first `GET .../invocation/next` at a fake Runtime API on 127.0.0.1, the moment a
binary is ready for its first invocation (where Lambda's init phase ends).

    scripts/measure-init.py [--runs N] [--store URL] [--env NAME=VALUE ...]
                            [--bin PATH] [--also LABEL=PATH ...] [--bare PATH | --no-bare]
                            [--timeline]

Without `--bin`/`--bare` it builds both first (release): `cargo build --release -p payments
--bin consumer` and the `bare_lambda` bench target (`benches/bare_lambda.rs`: a function that
only echoes its event, on the same `lambda_runtime` and tokio). The runs alternate between the
two binaries, so a busy machine slows both alike; it prints each one's median, min and max and
the ratio of the medians (the first run of each is a warm-up and not counted: it pays the page
cache). On DynamoDB Local, for example:

    scripts/measure-init.py --store dynamodb:init-bench \\
        --env AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:8000

(the tables must exist: `payments init --store dynamodb:init-bench`). Whatever the store does at
start-up inside Lambda's init (opening it, and anything the consumer does not overlap with the
first `next`) is part of the figure, as in Lambda. `--timeline` runs the consumer once more with
`RUST_LOG=sqs_claim=debug` and prints its log, which stamps each step of the start.

`--also LABEL=PATH` adds another build of the consumer (the artifact `cargo lambda build` or
`sam build` makes, say: scripts/measure-deployed.sh), measured in the same alternation with the
consumer's environment, each with its ratio to the bare function.
"""
import argparse
import http.server
import json
import os
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")

parser = argparse.ArgumentParser()
parser.add_argument("--bin", help="the consumer binary (default: build it)")
parser.add_argument("--bare", help="the bare lambda_runtime function (default: build it)")
parser.add_argument("--no-bare", action="store_true", help="measure the consumer alone")
parser.add_argument("--also", action="append", default=[], metavar="LABEL=PATH",
                    help="another consumer binary, measured beside (repeatable)")
parser.add_argument("--runs", type=int, default=20)
parser.add_argument("--store", default=None)
parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for the consumer")
parser.add_argument("--timeline", action="store_true")
args = parser.parse_args()


def cargo_exe(cargo_args, target):
    """Builds with cargo and returns the executable of `target` from its JSON messages."""
    cmd = [os.environ.get("CARGO", "cargo")] + cargo_args + [
        "--message-format=json-render-diagnostics"]
    out = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, check=True).stdout
    exe = None
    for line in out.decode().splitlines():
        m = json.loads(line)
        if (m.get("reason") == "compiler-artifact" and m["target"]["name"] == target
                and m.get("executable")):
            exe = m["executable"]
    if not exe:
        sys.exit(f"cargo built no executable for {target}")
    return exe


consumer = args.bin or cargo_exe(["build", "--release", "-p", "payments", "--bin", "consumer"],
                                 "consumer")
bare = None
if not args.no_bare:
    bare = args.bare or cargo_exe(
        ["bench", "-p", "sqs-claim", "--bench", "bare_lambda", "--no-run"], "bare_lambda")

first_next = {}
ready = threading.Event()


class Runtime(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path.endswith("/invocation/next"):
            first_next.setdefault("t", time.perf_counter_ns())
            ready.set()
            # Hold the request: the binary waits here, as it would for its first event.
            time.sleep(0.5)
        self.send_response(500)
        self.end_headers()

    def do_POST(self):
        self.send_response(202)
        self.end_headers()

    def log_message(self, *a):
        pass


class Server(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        pass  # a binary killed while its `next` is held resets the connection: expected


server = Server(("127.0.0.1", 0), Runtime)
threading.Thread(target=server.serve_forever, daemon=True).start()
port = server.server_address[1]

base_env = {
    "PATH": os.environ.get("PATH", ""),
    "AWS_LAMBDA_RUNTIME_API": f"127.0.0.1:{port}",
    "AWS_LAMBDA_FUNCTION_NAME": "init-bench",
    "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
    "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "256",
    "AWS_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": "test",
    "AWS_SECRET_ACCESS_KEY": "test",
    "AWS_EC2_METADATA_DISABLED": "true",
    "RUST_LOG": "warn",
}
consumer_env = dict(base_env)
for kv in args.env:
    k, _, v = kv.partition("=")
    consumer_env[k] = v
if args.store:
    consumer_env["SQS_CLAIM_STORE"] = args.store


def init_ms(exe, env, stderr=subprocess.PIPE):
    """One start of `exe`: milliseconds from exec to its first `next`."""
    first_next.clear()
    ready.clear()
    start = time.perf_counter_ns()
    proc = subprocess.Popen([exe], env=env, stdout=subprocess.PIPE, stderr=stderr)
    if not ready.wait(10):
        proc.kill()
        out, err = proc.communicate()
        sys.exit(f"{exe} never asked for an invocation:\n{(out or b'').decode(errors='replace')}"
                 f"{(err or b'').decode(errors='replace')}")
    proc.kill()
    out, _ = proc.communicate()
    return (first_next["t"] - start) / 1e6, out


subjects = [("consumer", consumer, consumer_env)]
for also in args.also:
    label, _, path = also.partition("=")
    if not path or not os.path.exists(path):
        sys.exit(f"--also {also}: expected LABEL=PATH of a binary")
    subjects.append((label, path, consumer_env))
if bare:
    subjects.append(("bare lambda_runtime", bare, base_env))
times = {name: [] for name, _, _ in subjects}
for run in range(args.runs + 1):
    # Alternate the order, so neither always runs right after the other.
    for name, exe, env in (subjects if run % 2 == 0 else subjects[::-1]):
        ms, _ = init_ms(exe, env)
        if run > 0:
            times[name].append(ms)

print(f"init (exec to first /invocation/next), {args.runs} runs each, alternating:")
width = max(20, *(len(name) for name, _, _ in subjects))
for name, _, _ in subjects:
    t = times[name]
    print(f"  {name:<{width}} median {statistics.median(t):5.1f} ms, min {min(t):5.1f} ms, "
          f"max {max(t):5.1f} ms")
if bare:
    b = statistics.median(times["bare lambda_runtime"])
    for name, _, _ in subjects[:-1]:
        c = statistics.median(times[name])
        print(f"  {name} / bare: x{c / b:.2f} (+{c - b:.1f} ms)")

if args.timeline:
    env = dict(consumer_env, RUST_LOG="sqs_claim=debug,payments=debug,info",
               AWS_LAMBDA_LOG_FORMAT="Text")
    ms, out = init_ms(consumer, env, stderr=subprocess.STDOUT)
    print(f"timeline of one more start ({ms:.1f} ms to the first next):")
    sys.stdout.write(out.decode(errors="replace"))
