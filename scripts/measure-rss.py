#!/usr/bin/env python3
"""Peak RSS of a warm batch: `payments invoke` of N fresh payments, and the `consumer` Lambda
binary serving the same batch under a fake Runtime API, each against a bare `lambda_runtime`
SQS function (benches/rss_floor.rs of the payments crate) given the same event in the same run.

    scripts/measure-rss.py [--n 1000] [--runs 3] [--store dynamodb|sqlite|both] [--bin-dir DIR]
                           [--also LABEL=PATH ...] [--no-invoke]

Peak RSS is the process's VmHWM: for `payments invoke` and the floor's file mode, the
`/usr/bin/time -f %M` of the process (its own high-water mark; /usr/bin/time's own is ~2 MiB);
for the consumer and the floor under the Runtime API, VmHWM read from /proc/PID/status once the
batch's response is posted (the process is then waiting for its next invocation; start-up and
the store's start-up check are included in both). Every run has fresh order ids on distinct
accounts (nothing contends, as in `make bench`'s credit worker), so every payment is a credit.

DynamoDB runs against SQS_CLAIM_DYNAMODB_ENDPOINT / AWS_ENDPOINT_URL_DYNAMODB (DynamoDB Local,
default http://127.0.0.1:8000), tables `rss-<run>`; SQLite in a temporary directory.
Binaries from --bin-dir (default $CARGO_TARGET_DIR/release, else target/release): `payments`
`consumer` and the floor `rss-floor`, all three from
`cargo build --release -p payments --features cli,rss-floor --bins`.
Prints the median peak of each and its ratio to the floor's, and the median CPU (user + system,
exec through the batch; getrusage of the process) of each.

`--also LABEL=PATH` measures another build of the consumer the same way in the same runs (the
artifact `cargo lambda build` or `sam build` makes: scripts/measure-deployed.sh), each run on
fresh ids of its own; `--no-invoke` leaves out `payments invoke` and the floor's file mode.
"""

import argparse
import hashlib
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
import uuid

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
MIB = 1024.0


def event(n, tag):
    records = []
    for i in range(n):
        body = json.dumps(
            {"order_id": f"{tag}-{i}", "account": f"acct-{tag}-{i}", "amount_cents": 100 + i},
            separators=(",", ":"),
        )
        records.append({
            "messageId": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{tag}-{i}")),
            "receiptHandle": "AQEB" + hashlib.sha256(f"rh-{tag}-{i}".encode()).hexdigest() * 4,
            "body": body,
            "attributes": {
                "ApproximateReceiveCount": "1",
                "SentTimestamp": "1795921200000",
                "SenderId": "AIDAIENQZJOLO23YVJ4VO",
                "ApproximateFirstReceiveTimestamp": "1795921200001",
            },
            "messageAttributes": {},
            "md5OfBody": hashlib.md5(body.encode()).hexdigest(),
            "eventSource": "aws:sqs",
            "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:payments",
            "awsRegion": "us-east-1",
        })
    return {"Records": records}


CPU = {}  # the last process's CPU seconds (user + system), by command name


def timed_maxrss(cmd, env, stdin=None):
    """Runs cmd under /usr/bin/time and returns (its max RSS in KiB, stdout, stderr)."""
    p = subprocess.run(["/usr/bin/time", "-f", "MAXRSS %M %U %S"] + cmd, env=env, stdin=stdin,
                       capture_output=True, text=True, timeout=300)
    lines = p.stderr.strip().splitlines()
    rss = [l for l in lines if l.startswith("MAXRSS ")]
    if p.returncode != 0 or not rss:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    f = rss[-1].split()
    CPU[os.path.basename(cmd[0])] = float(f[2]) + float(f[3])
    return int(f[1]), p.stdout, "\n".join(l for l in lines if not l.startswith("MAXRSS "))


class FakeRuntime:
    """A Runtime API that hands out one event and records the response."""

    def __init__(self):
        self.body = b""
        self.response = None
        self.responded = threading.Event()
        self.handed = threading.Event()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                if not self.path.endswith("/invocation/next"):
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if outer.handed.is_set():
                    # The next invocation never comes: the process waits here, as in Lambda.
                    time.sleep(30)
                    return
                outer.handed.set()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Lambda-Runtime-Aws-Request-Id", "rss-1")
                self.send_header("Lambda-Runtime-Deadline-Ms", str(int(time.time() * 1000) + 120_000))
                self.send_header("Lambda-Runtime-Invoked-Function-Arn",
                                 "arn:aws:lambda:us-east-1:123456789012:function:rss")
                self.send_header("Lambda-Runtime-Trace-Id", "Root=1-00000000-000000000000000000000000")
                self.send_header("Content-Length", str(len(outer.body)))
                self.end_headers()
                self.wfile.write(outer.body)

            def do_POST(self):
                length = int(self.headers.get("Content-Length", "0"))
                data = self.rfile.read(length)
                if "/response" in self.path or "/error" in self.path:
                    outer.response = (self.path, data)
                self.send_response(202)
                self.send_header("Content-Length", "0")
                self.end_headers()
                if outer.response is not None:
                    outer.responded.set()

            def log_message(self, *a):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.addr = f"127.0.0.1:{self.server.server_address[1]}"

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def vm(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return None


def lambda_peak(cmd, env, ev_bytes):
    """Serves one invocation of ev_bytes to cmd; returns (VmHWM KiB after the response, the
    response)."""
    rt = FakeRuntime()
    rt.body = ev_bytes
    env = dict(env)
    env.update({
        "AWS_LAMBDA_RUNTIME_API": rt.addr,
        "AWS_LAMBDA_FUNCTION_NAME": "rss",
        "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "256",
    })
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        if not rt.responded.wait(120):
            p.kill()
            sys.exit(f"{cmd[0]} never answered:\n{p.stderr.read().decode(errors='replace')[-3000:]}")
        time.sleep(0.05)
        hwm = vm(p.pid, "VmHWM")
    finally:
        p.kill()
        # The CPU of the whole run (it idles once the response is posted), in microseconds.
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = status
        CPU[os.path.basename(cmd[0])] = usage.ru_utime + usage.ru_stime
        rt.stop()
    return hwm, rt.response


def dynamodb_env(table):
    """(endpoint, environment) for a process of ours on DynamoDB Local's table `table`: the
    endpoint from AWS_ENDPOINT_URL_DYNAMODB / SQS_CLAIM_DYNAMODB_ENDPOINT (default
    127.0.0.1:8000), dummy credentials, no instance metadata, `SQS_CLAIM_STORE=dynamodb:TABLE`."""
    endpoint = os.environ.get("AWS_ENDPOINT_URL_DYNAMODB") or os.environ.get(
        "SQS_CLAIM_DYNAMODB_ENDPOINT", "http://127.0.0.1:8000")
    return endpoint, {
        "PATH": os.environ.get("PATH", ""), "AWS_ENDPOINT_URL_DYNAMODB": endpoint,
        "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true", "SQS_CLAIM_STORE": f"dynamodb:{table}"}


def drop_table(endpoint, table):
    """Drops a table of this run (DynamoDB Local keeps them in memory, shared with the tests).
    DynamoDB Local reads the credentials' key id from the header and checks no signature."""
    import urllib.request
    for t in (table, f"{table}-accounts"):
        req = urllib.request.Request(
            endpoint, data=json.dumps({"TableName": t}).encode(), method="POST",
            headers={
                "Content-Type": "application/x-amz-json-1.0",
                "X-Amz-Target": "DynamoDB_20120810.DeleteTable",
                "Authorization": "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/dynamodb/aws4_request, "
                                 "SignedHeaders=host, Signature=0",
            })
        try:
            urllib.request.urlopen(req, timeout=10).read()
        except Exception as e:  # a table left behind is not a measurement error
            print(f"   could not drop {t}: {e}", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--store", default="dynamodb", choices=["dynamodb", "sqlite", "both"])
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    ap.add_argument("--bin-dir", default=os.path.join(target, "release"))
    ap.add_argument("--floor", default=None)
    ap.add_argument("--no-consumer", action="store_true")
    ap.add_argument("--also", action="append", default=[], metavar="LABEL=PATH",
                    help="another consumer binary, measured beside (repeatable)")
    ap.add_argument("--no-invoke", action="store_true")
    args = ap.parse_args()
    also = []
    for a in args.also:
        label, _, path = a.partition("=")
        if not path or not os.path.exists(path):
            sys.exit(f"--also {a}: expected LABEL=PATH of a binary")
        also.append((label, path))

    payments = os.path.join(args.bin_dir, "payments")
    consumer = os.path.join(args.bin_dir, "consumer")
    floor = args.floor or os.path.join(args.bin_dir, "rss-floor")
    for b in (payments, consumer, floor):
        if not b or not os.path.exists(b):
            sys.exit(f"missing binary {b}: build with "
                     "`cargo build --release -p payments --features cli,rss-floor --bins`")

    endpoint = os.environ.get("AWS_ENDPOINT_URL_DYNAMODB") or os.environ.get(
        "SQS_CLAIM_DYNAMODB_ENDPOINT", "http://127.0.0.1:8000")
    base = {
        "PATH": os.environ.get("PATH", ""),
        "AWS_ENDPOINT_URL_DYNAMODB": endpoint,
        "AWS_ACCESS_KEY_ID": os.environ.get("AWS_ACCESS_KEY_ID", "test"),
        "AWS_SECRET_ACCESS_KEY": os.environ.get("AWS_SECRET_ACCESS_KEY", "test"),
        "AWS_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    for k in ("MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES",
              "AWS_LAMBDA_MAX_CONCURRENCY"):  # what-ifs, passed through when set
        if k in os.environ:
            base[k] = os.environ[k]
    run_id = uuid.uuid4().hex[:8]
    stores = ["dynamodb", "sqlite"] if args.store == "both" else [args.store]
    tmp = tempfile.mkdtemp(prefix="rss-")
    print(f"== peak RSS of one warm batch of {args.n} fresh payments, run {run_id}, {args.runs} runs each "
          f"(load {os.getloadavg()[0]:.2f})")
    results = {}
    try:
        for store in stores:
            if store == "dynamodb":
                url = f"dynamodb:rss-{run_id}"
            else:
                url = f"sqlite:{tmp}/claims.db"
            env = dict(base)
            env["SQS_CLAIM_STORE"] = url
            timed_maxrss([payments, "init", "--store", url], env)
            rows = {"floor (file)": [], "payments invoke": [], "floor (runtime)": [], "consumer": []}
            for label, _ in also:
                rows[label] = []
            cpu = {k: [] for k in rows}
            for r in range(args.runs):
                path = os.path.join(tmp, f"ev-{store}-{r}.json")
                ev = event(args.n, f"{run_id}-{store}-{r}")
                data = json.dumps(ev).encode()
                with open(path, "wb") as f:
                    f.write(data)
                if not args.no_invoke:
                    kib, _, _ = timed_maxrss([floor, "--event", path], env)
                    rows["floor (file)"].append(kib)
                    cpu["floor (file)"].append(CPU[os.path.basename(floor)])
                    kib, out, err = timed_maxrss([payments, "invoke", path, "--store", url], env)
                    if json.loads(out).get("batchItemFailures"):
                        sys.exit(f"payments invoke reported failures:\n{out[:2000]}\n{err[-2000:]}")
                    rows["payments invoke"].append(kib)
                    cpu["payments invoke"].append(CPU["payments"])
                if args.no_consumer:
                    continue
                kib, _ = lambda_peak([floor], env, data)
                rows["floor (runtime)"].append(kib)
                cpu["floor (runtime)"].append(CPU[os.path.basename(floor)])
                # The consumer on fresh ids of its own (the same shape and size).
                ev2 = json.dumps(event(args.n, f"{run_id}-{store}-{r}-c")).encode()
                env_c = dict(env)
                env_c["RUST_LOG"] = "info"
                kib, resp = lambda_peak([consumer], env_c, ev2)
                if not resp[0].endswith("/response") or json.loads(resp[1]).get("batchItemFailures"):
                    sys.exit(f"consumer answered {resp[0]}: {resp[1][:2000]!r}")
                rows["consumer"].append(kib)
                cpu["consumer"].append(CPU["consumer"])
                for k, (label, path) in enumerate(also):
                    ev3 = json.dumps(event(args.n, f"{run_id}-{store}-{r}-a{k}")).encode()
                    kib, resp = lambda_peak([path], env_c, ev3)
                    if not resp[0].endswith("/response") or json.loads(resp[1]).get("batchItemFailures"):
                        sys.exit(f"{label} answered {resp[0]}: {resp[1][:2000]!r}")
                    rows[label].append(kib)
                    cpu[label].append(CPU[os.path.basename(path)])
            results[store] = rows
            print(f"-- store {url}")
            med = {k: statistics.median(v) for k, v in rows.items() if v}
            for k, v in rows.items():
                if not v:
                    continue
                f = "floor (file)" if k in ("floor (file)", "payments invoke") else "floor (runtime)"
                ratio = med[k] / med[f]
                print(f"   {k:16} median {med[k] / MIB:6.1f} MiB  (runs: "
                      + ", ".join(f"{x / MIB:.1f}" for x in v) + f")  x{ratio:.2f} of {f}"
                      + f"  CPU {statistics.median(cpu[k]) * 1000:.0f} ms")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if "dynamodb" in stores:
            drop_table(endpoint, f"rss-{run_id}")
    print(json.dumps({"run": run_id, "n": args.n, "kib": results}))


if __name__ == "__main__":
    main()
