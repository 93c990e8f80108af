#!/usr/bin/env python3
"""Lambda init of the `consumer` binary: from exec to its first `GET .../invocation/next` at a
fake Runtime API on 127.0.0.1, the moment the binary is ready for its first invocation.

    scripts/measure-init.py [--bin PATH] [--runs N] [--store URL] [--table T --accounts-table A]

The store's own start-up check (the tables exist and answer) is part of init, as in Lambda.
Prints the median, min and max over the runs (the first run is a warm-up and not counted: it
pays the page cache).
"""
import argparse
import http.server
import os
import statistics
import subprocess
import sys
import threading
import time

parser = argparse.ArgumentParser()
parser.add_argument("--bin", default=os.path.join(
    os.environ.get("CARGO_TARGET_DIR", "target"), "release", "consumer"))
parser.add_argument("--runs", type=int, default=20)
parser.add_argument("--store", default=None)
parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for the binary")
args = parser.parse_args()

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


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Runtime)
threading.Thread(target=server.serve_forever, daemon=True).start()
port = server.server_address[1]

env = {
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
for kv in args.env:
    k, _, v = kv.partition("=")
    env[k] = v
if args.store:
    env["SQS_CLAIM_STORE"] = args.store

times = []
for run in range(args.runs + 1):
    first_next.clear()
    ready.clear()
    start = time.perf_counter_ns()
    proc = subprocess.Popen([args.bin], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    if not ready.wait(10):
        proc.kill()
        err = proc.stderr.read().decode(errors="replace")
        sys.exit(f"the consumer never asked for an invocation:\n{err}")
    proc.kill()
    proc.wait()
    if run > 0:
        times.append((first_next["t"] - start) / 1e6)

print(f"init (exec to first /invocation/next), {args.runs} runs: median "
      f"{statistics.median(times):.1f} ms, min {min(times):.1f} ms, max {max(times):.1f} ms")
