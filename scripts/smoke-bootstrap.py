#!/usr/bin/env python3
"""Runs a built `bootstrap` (the reference consumer as `sam build` makes it) on one SQS event
against DynamoDB Local, as Lambda would: under a fake Runtime API, with the environment the
template gives it. An arm64 bootstrap on an x86_64 machine runs under user-mode emulation
(Debian's `qemu-user`: `qemu-aarch64`, with `libc6-arm64-cross`'s loader and libc as its root).

    scripts/smoke-bootstrap.py [--payments PATH] BOOTSTRAP...
    make smoke-bootstrap        # every bootstrap `make sam-build` kept for template.yaml

The event: 10 messages, 8 payments to 8 fresh accounts and 2 of them sent again (other message
ids, the same order ids). Passes when the batch response has no failures and the accounts
table holds each of the 8 credits once (`payments balances`). Tables `smoke-<run>` (created with
`payments init`, dropped at the end) on SQS_CLAIM_DYNAMODB_ENDPOINT / AWS_ENDPOINT_URL_DYNAMODB
(default http://127.0.0.1:8000). `--payments` defaults to $CARGO_TARGET_DIR/debug/payments,
built when missing (`cargo build -p payments --features cli --bin payments`).
"""

import argparse
import importlib.util
import json
import os
import platform
import shutil
import struct
import subprocess
import sys
import time
import uuid

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
spec = importlib.util.spec_from_file_location("mr", os.path.join(ROOT, "scripts", "measure-rss.py"))
mr = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mr)

# e_machine -> (name, the qemu-user binary, the root its loader and libc are found under)
MACHINES = {62: ("x86_64", "qemu-x86_64", "/usr/x86_64-linux-gnu"),
            183: ("aarch64", "qemu-aarch64", "/usr/aarch64-linux-gnu")}


def machine(path):
    with open(path, "rb") as f:
        header = f.read(20)
    if header[:4] != b"\x7fELF":
        sys.exit(f"{path} is not an ELF file")
    return struct.unpack("<H", header[18:20])[0]


def command(bootstrap):
    """The bootstrap's command line: itself on its own machine, else under qemu-user."""
    m = machine(bootstrap)
    if m not in MACHINES:
        sys.exit(f"{bootstrap}: e_machine {m} is neither x86-64 nor AArch64")
    name, qemu, root = MACHINES[m]
    if platform.machine() == name:
        return [bootstrap], "native"
    if not shutil.which(qemu) or not os.path.isdir(root):
        sys.exit(f"{bootstrap} is {name}: running it here needs {qemu} and {root} "
                 f"(Debian: apt-get install qemu-user libc6-{'arm64' if name == 'aarch64' else 'amd64'}-cross)")
    return [qemu, "-L", root, bootstrap], f"under {qemu}"


def smoke_event(tag):
    ev = mr.event(8, tag)
    for i in (1, 5):  # sent again: another message id, the same payment
        again = json.loads(json.dumps(ev["Records"][i]))
        again["messageId"] = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{tag}-{i}-again"))
        ev["Records"].append(again)
    return ev


def main():
    ap = argparse.ArgumentParser()
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    ap.add_argument("--payments", default=os.path.join(target, "debug", "payments"))
    ap.add_argument("bootstrap", nargs="+")
    args = ap.parse_args()
    if not os.path.exists(args.payments):
        subprocess.run(["cargo", "build", "-p", "payments", "--features", "cli", "--bin", "payments"],
                       cwd=ROOT, check=True)
    run = uuid.uuid4().hex[:8]
    table = f"smoke-{run}"
    endpoint, env = mr.dynamodb_env(table)
    # What template.yaml sets (its ConsumerFunction's Environment), for the tables made here.
    env.update({"SQS_CLAIM_TABLE": table, "SQS_CLAIM_ACCOUNTS_TABLE": f"{table}-accounts",
                "SQS_CLAIM_KEY": "json:/order_id",
                "AWS_LAMBDA_LOG_FORMAT": "JSON", "AWS_LAMBDA_LOG_LEVEL": "INFO"})
    failed = []
    try:
        init = subprocess.run([args.payments, "init", "--store", f"dynamodb:{table}"], env=env,
                              capture_output=True, text=True)
        if init.returncode:
            sys.exit(f"payments init failed (is DynamoDB Local up at {endpoint}?): {init.stderr.strip()}")
        for n, bootstrap in enumerate(args.bootstrap):
            cmd, how = command(os.path.abspath(bootstrap))
            ev = smoke_event(f"{run}-{n}")
            start = time.monotonic()
            _, (path, body) = mr.lambda_peak(cmd, env, json.dumps(ev).encode())
            wall = time.monotonic() - start
            problems = []
            response = json.loads(body or b"{}") if path.endswith("/response") else None
            if response is None:
                problems.append(f"it posted {path}: {body[:500]!r}")
            elif response.get("batchItemFailures"):
                problems.append(f"the batch response has failures: {response['batchItemFailures']}")
            listed = subprocess.run([args.payments, "balances", "--store", f"dynamodb:{table}"],
                                    env=env, capture_output=True, text=True, check=True).stdout
            balances = dict(line.split("\t") for line in listed.splitlines())
            for r in ev["Records"][:8]:
                p = json.loads(r["body"])
                got = balances.get(p["account"])
                if got != str(p["amount_cents"]):
                    problems.append(f"account {p['account']}: {got} cents, expected {p['amount_cents']} (once)")
            arch = MACHINES[machine(bootstrap)][0]
            if problems:
                failed.append(bootstrap)
                print(f"FAILED: {bootstrap} ({arch}, {how}): " + "; ".join(problems), file=sys.stderr)
            else:
                print(f"ok: {bootstrap} ({arch}, {how}): 10 messages, 8 credits applied once, "
                      f"2 duplicates skipped, no failures ({wall:.1f} s)")
    finally:
        mr.drop_table(endpoint, table)
    if failed:
        sys.exit(f"smoke-bootstrap: {len(failed)} of {len(args.bootstrap)} failed")


if __name__ == "__main__":
    main()
