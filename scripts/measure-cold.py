#!/usr/bin/env python3
"""A cold process at a distance: a fresh process handling one batch of N fresh payments on
DynamoDB Local behind the delay proxy (`benches/delay_proxy.rs`, a fixed delay on every request,
as a remote table would have). Two entry points: the `consumer`, from exec to the batch response
it posts to a fake Lambda Runtime API; and `payments invoke EVENT.json`, from exec to its exit.
Counted by the proxy: the requests (by operation) and the connections.

    scripts/measure-cold.py [--n 100] [--rtt-ms 100] [--runs 5] [--entry consumer|invoke|both]
                            [--bin PATH] [--payments PATH] [--proxy PATH] [--endpoint URL] [--table T]

Without `--bin`/`--payments`/`--proxy` it builds them (release). Each run is a new process, a new
batch (new order ids and accounts), the same tables (created once with `payments init`). The
figure is the wall in round trips (wall / RTT) at `--rtt-ms`, and beside it the same cold run at
0 ms in the same invocation of the script (the process's own work: exec, init, CPU), so that
(wall − wall at 0 ms) / RTT is the round trips spent waiting on the table.
"""
import argparse
import http.server
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")

parser = argparse.ArgumentParser()
parser.add_argument("--n", type=int, default=100, help="payments in the batch")
parser.add_argument("--rtt-ms", type=int, default=100, help="the proxy's delay per request")
parser.add_argument("--runs", type=int, default=5, help="cold processes per delay")
parser.add_argument("--bin", help="the consumer binary (default: build it)")
parser.add_argument("--payments", help="the payments binary, for `init` (default: build it)")
parser.add_argument("--proxy", help="the delay_proxy bench binary (default: build it)")
parser.add_argument("--endpoint", default=os.environ.get(
    "SQS_CLAIM_DYNAMODB_ENDPOINT", "http://127.0.0.1:8000"))
parser.add_argument("--table", default="cold-bench")
parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for the consumer")
parser.add_argument("--entry", default="both", choices=["consumer", "invoke", "both"],
                    help="which entry point to run cold (default both)")
args = parser.parse_args()


def cargo_exe(cargo_args, target):
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


consumer = args.bin or cargo_exe(
    ["build", "--release", "-p", "payments", "--bin", "consumer"], "consumer")
payments = args.payments or cargo_exe(
    ["build", "--release", "-p", "payments", "--features", "cli", "--bin", "payments"],
    "payments")
proxy_exe = args.proxy or cargo_exe(
    ["bench", "-p", "sqs-claim", "--bench", "delay_proxy", "--no-run"], "delay_proxy")

aws = {
    "PATH": os.environ.get("PATH", ""),
    "AWS_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": "test",
    "AWS_SECRET_ACCESS_KEY": "test",
    "AWS_EC2_METADATA_DISABLED": "true",
}
store = f"dynamodb:{args.table}"
subprocess.run([payments, "init", "--store", store], check=True, stdout=subprocess.DEVNULL,
               env=dict(aws, AWS_ENDPOINT_URL_DYNAMODB=args.endpoint))

upstream = args.endpoint.split("://", 1)[-1].rstrip("/")
proxy = subprocess.Popen([proxy_exe, "--listen", "127.0.0.1:0", "--upstream", upstream,
                          "--delay-ms", "0"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
proxy_addr = proxy.stdout.readline().decode().split()[-1]


def take(delay_ms):
    """The proxy's counts since the last take; sets the delay for what follows."""
    with urllib.request.urlopen(f"http://{proxy_addr}/__bench/take?delay_ms={delay_ms}") as r:
        return json.load(r)


def event(n):
    batch = uuid.uuid4().hex[:8]
    records = []
    for i in range(n):
        body = json.dumps({"order_id": f"cold-{batch}-{i}", "account": f"acct-{batch}-{i}",
                           "amount_cents": 100})
        records.append({
            "messageId": str(uuid.uuid4()),
            "receiptHandle": f"rh-{batch}-{i}",
            "body": body,
            "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1795921200000",
                           "SenderId": "AIDAIENQZJOLO23YVJ4VO",
                           "ApproximateFirstReceiveTimestamp": "1795921200041"},
            "messageAttributes": {},
            "md5OfBody": "",
            "eventSource": "aws:sqs",
            "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:payments",
            "awsRegion": "us-east-1",
        })
    return json.dumps({"Records": records}).encode()


state = {}
answered = threading.Event()


class Runtime(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        if not self.path.endswith("/invocation/next"):
            self.send_response(404)
            self.send_header("content-length", "0")
            self.end_headers()
            return
        # A `next` from an earlier run's process (sent just before it was killed, read after the
        # next run began) reaches its own, retired server and is held: it must not take this
        # run's event, which would leave this run's process without one.
        body = state.pop("event", None) if self.server is current["server"] else None
        if body is None:
            # One event per process: hold later polls until the process is killed.
            time.sleep(5)
            self.close_connection = True
            return
        state["next"] = time.perf_counter_ns()
        self.send_response(200)
        self.send_header("Lambda-Runtime-Aws-Request-Id", state["request_id"])
        self.send_header("Lambda-Runtime-Deadline-Ms", str(int(time.time() * 1000) + 30_000))
        self.send_header("Lambda-Runtime-Invoked-Function-Arn",
                         "arn:aws:lambda:us-east-1:123456789012:function:cold-bench")
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        length = int(self.headers.get("content-length") or 0)
        data = self.rfile.read(length) if length else b""
        if "/invocation/" in self.path:
            state["answer_at"] = time.perf_counter_ns()
            state["answer"] = (self.path.rsplit("/", 1)[-1], data)
            answered.set()
        self.send_response(202)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *a):
        pass


class Server(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        pass  # a binary killed while its `next` is held resets the connection: expected


# One fake Runtime API per cold run (see `do_GET`); `current` is this run's.
current = {"server": None}


def fresh_runtime_api():
    old = current["server"]
    if old is not None:
        threading.Thread(target=old.shutdown, daemon=True).start()
    server = Server(("127.0.0.1", 0), Runtime)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    current["server"] = server
    return f"127.0.0.1:{server.server_address[1]}"


runtime_api = fresh_runtime_api()

env = dict(aws, **{
    "AWS_LAMBDA_RUNTIME_API": runtime_api,
    "AWS_LAMBDA_FUNCTION_NAME": "cold-bench",
    "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
    "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "256",
    "AWS_ENDPOINT_URL_DYNAMODB": f"http://{proxy_addr}",
    "SQS_CLAIM_STORE": store,
    "SQS_CLAIM_METRICS_NAMESPACE": "off",
    "RUST_LOG": "warn",
})
for kv in args.env:
    k, _, v = kv.partition("=")
    env[k] = v


def cold_invoke(delay_ms):
    """`payments invoke` of a fresh batch, exec to exit."""
    path = os.path.join(tmp, "event.json")
    with open(path, "wb") as f:
        f.write(event(args.n))
    take(delay_ms)
    start = time.perf_counter_ns()
    p = subprocess.run([payments, "invoke", path, "--store", store], env=env, capture_output=True)
    wall = (time.perf_counter_ns() - start) / 1e6
    if p.returncode or json.loads(p.stdout or b"{}").get("batchItemFailures"):
        sys.exit(f"payments invoke failed ({p.returncode}): {p.stdout[:500]!r}\n"
                 f"{p.stderr.decode(errors='replace')[-2000:]}")
    counts = take(delay_ms)
    return {"wall": wall, "init": float("nan"), "requests": counts["requests"],
            "connections": counts["connections"], "ops": counts["ops"]}


def cold_run(delay_ms):
    state.clear()
    answered.clear()
    state["event"] = event(args.n)
    state["request_id"] = str(uuid.uuid4())
    env["AWS_LAMBDA_RUNTIME_API"] = fresh_runtime_api()
    take(delay_ms)
    start = time.perf_counter_ns()
    proc = subprocess.Popen([consumer], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if not answered.wait(30):
        proc.kill()
        sys.exit("no answer from the consumer:\n" + proc.communicate()[0].decode(errors="replace"))
    proc.kill()
    logs = proc.communicate()[0].decode(errors="replace")
    kind, body = state["answer"]
    if kind != "response" or json.loads(body or b"{}").get("batchItemFailures"):
        sys.exit(f"the batch did not succeed ({kind}): {body[:500]!r}\n{logs}")
    counts = take(delay_ms)
    return {
        "wall": (state["answer_at"] - start) / 1e6,
        "init": (state["next"] - start) / 1e6,
        "requests": counts["requests"],
        "connections": counts["connections"],
        "ops": counts["ops"],
    }


entries = {"consumer": cold_run, "invoke": cold_invoke}
if args.entry != "both":
    entries = {args.entry: entries[args.entry]}
tmp = tempfile.mkdtemp(prefix="cold-")
try:
    results = {}
    for name, run in entries.items():
        run(0)  # warm-up: the page cache, DynamoDB Local's first requests
        results[name] = {}
        for delay in (0, args.rtt_ms):
            results[name][delay] = [run(delay) for _ in range(args.runs)]
finally:
    proxy.kill()
    shutil.rmtree(tmp, ignore_errors=True)

for name, by_delay in results.items():
    what = ("a cold consumer process (exec to the batch response)" if name == "consumer"
            else "a cold `payments invoke` (exec to exit)")
    print(f"{what}, one batch of {args.n} fresh payments, {args.runs} runs per delay:")
    base = statistics.median(r["wall"] for r in by_delay[0])
    for delay, runs in by_delay.items():
        wall = statistics.median(r["wall"] for r in runs)
        init = statistics.median(r["init"] for r in runs)
        ops = runs[-1]["ops"]
        first = f"first next at {init:.1f} ms, " if name == "consumer" else ""
        line = (f"  +{delay:>3} ms/request: wall median {wall:6.1f} ms (min "
                f"{min(r['wall'] for r in runs):.1f}, max {max(r['wall'] for r in runs):.1f}), "
                f"{first}{runs[-1]['requests']} requests "
                f"{json.dumps(ops, separators=(',', ':'))}, {runs[-1]['connections']} connections")
        print(line)
        if delay:
            print(f"  round trips: wall / RTT = {wall / delay:.2f}; "
                  f"(wall - wall at 0 ms) / RTT = {(wall - base) / delay:.2f}")
