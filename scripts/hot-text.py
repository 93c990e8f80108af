#!/usr/bin/env python3
"""Writes examples/payments/hot-text.ld: the functions a warm batch runs, placed together at the
front of the `consumer`'s and `payments`' code (the app's build.rs passes it to the linker in
release builds; docs/performance.md, "The code a batch runs, together").

    scripts/hot-text.py [--bin-dir DIR] [--deployed CONSUMER ...] [--n 200]
                        [--out examples/payments/hot-text.ld]

Runs, under valgrind's callgrind (which lists every function executed), the binaries of
`cargo build --release -p payments --features cli,rss-floor --bins` (the build
scripts/measure-rss.py measures; default $CARGO_TARGET_DIR/release) on the workloads
scripts/measure-rss.py measures: the `consumer` under a fake Runtime API and `payments invoke`,
on DynamoDB Local (SQS_CLAIM_DYNAMODB_ENDPOINT / AWS_ENDPOINT_URL_DYNAMODB) and on SQLite, the
consumer both on its default runtime and with AWS_LAMBDA_MAX_CONCURRENCY (the multi-thread one).

`--deployed` (repeatable) names a `consumer` built as it is deployed, with other symbol hashes:
`cargo build --release -p payments --bin consumer` (without the feature `cli`), and the twin of
what `cargo lambda build --release` makes for x86_64 (`scripts/hot-text-lambda.sh`: the same
target, flags and features, unstripped), each profiled on the same consumer workloads and
written beside the first build's (its names do not match there, nor the first build's in it, so
each build finds its own).

A function's section is named by its mangled symbol, whose hash (`17h<16 hex>E`) changes with
the crate's features and dependencies. Where only one function of the profiled binary has a
path, the pattern leaves the hash out (`*`), so it still matches in a build with other features
(the deployed `consumer` is built without `cli`); a generic function's instances share a path,
and those are named exactly: in another build they are not found and stay where they were.
Each pattern names both sections a function may be in: `.text.NAME`, and `.text.unlikely.NAME`
where LLVM put a function it judged cold (`#[cold]` ones: a vector's growth, a `OnceLock`'s
initialisation), which a batch runs all the same.
Functions are written by workload, the deployed case first (the consumer on DynamoDB, on its
default runtime; then with AWS_LAMBDA_MAX_CONCURRENCY; then `payments invoke`; then the same on
SQLite), each workload's functions not already written hottest first (instructions executed), so
that the consumer on DynamoDB touches the front of the section only. Last, every hot generic
function's instances by path alone (hash left out), so that a build none of these binaries
names (the arm64 artifact, whose hashes differ with the target) still gets a layout.
"""

import argparse
import collections
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
spec = importlib.util.spec_from_file_location("mr", os.path.join(ROOT, "scripts", "measure-rss.py"))
mr = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mr)


def callgrind_costs(path, own=False):
    """{symbol: instructions} from a callgrind output file (names compressed): by default each
    function's own instructions plus those of the calls it makes (what the layout ranks by);
    `own=True`, its own alone (a call's cost line, after `calls=`, left out)."""
    names, cost, cur, call = {}, collections.Counter(), None, False
    with open(path) as f:
        for line in f:
            m = re.match(r"(c?fn)=\((\d+)\)(?: (.*))?$", line.rstrip("\n"))
            if m:
                if m.group(3):
                    names[m.group(2)] = m.group(3)
                if m.group(1) == "fn":
                    cur = m.group(2)
                continue
            if line.startswith("calls="):
                call = True
                continue
            if cur and (line[:1].isdigit() or line[:1] in "+-*"):
                parts = line.split()
                if len(parts) >= 2 and not (own and call):
                    cost[cur] += int(parts[1])
                call = False
    out = collections.Counter()
    for k, name in names.items():
        out[name] += cost.get(k, 0)
    return out


def profile_consumer(binary, env, n, tag, extra, own=False):
    rt = mr.FakeRuntime()
    rt.body = json.dumps(mr.event(n, tag)).encode()
    out = tempfile.mktemp(prefix="cg-")
    env = dict(env)
    env.update(extra)
    env.update({"AWS_LAMBDA_RUNTIME_API": rt.addr, "AWS_LAMBDA_FUNCTION_NAME": "hot",
                "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "256",
                "RUST_LOG": "info"})
    p = subprocess.Popen(["valgrind", "--tool=callgrind", "--demangle=no",
                          f"--callgrind-out-file={out}", binary], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        if not rt.responded.wait(600):
            sys.exit(f"{binary} never answered under callgrind")
    finally:
        p.terminate()
        p.wait()
        rt.stop()
    costs = callgrind_costs(out, own)
    os.unlink(out)
    return costs


def profile_invoke(binary, env, n, tag, url, tmp):
    path = os.path.join(tmp, f"{tag}.json")
    with open(path, "w") as f:
        json.dump(mr.event(n, tag), f)
    out = tempfile.mktemp(prefix="cg-")
    subprocess.run(["valgrind", "--tool=callgrind", "--demangle=no", f"--callgrind-out-file={out}",
                    binary, "invoke", path, "--store", url], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    costs = callgrind_costs(out)
    os.unlink(out)
    return costs


def main():
    ap = argparse.ArgumentParser()
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    ap.add_argument("--bin-dir", default=os.path.join(target, "release"))
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--deployed", action="append", default=[],
                    help="a consumer built as deployed (repeatable)")
    ap.add_argument("--out", default=os.path.join(ROOT, "examples", "payments", "hot-text.ld"))
    args = ap.parse_args()
    if not shutil.which("valgrind"):
        sys.exit("valgrind is needed (apt-get install valgrind)")
    consumer = os.path.join(args.bin_dir, "consumer")
    payments = os.path.join(args.bin_dir, "payments")
    endpoint = os.environ.get("AWS_ENDPOINT_URL_DYNAMODB") or os.environ.get(
        "SQS_CLAIM_DYNAMODB_ENDPOINT", "http://127.0.0.1:8000")
    base = {"PATH": os.environ.get("PATH", ""), "AWS_ENDPOINT_URL_DYNAMODB": endpoint,
            "AWS_ACCESS_KEY_ID": os.environ.get("AWS_ACCESS_KEY_ID", "test"),
            "AWS_SECRET_ACCESS_KEY": os.environ.get("AWS_SECRET_ACCESS_KEY", "test"),
            "AWS_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}
    run = uuid.uuid4().hex[:8]
    tmp = tempfile.mkdtemp(prefix="hot-")
    workloads = []  # (name, {symbol: instructions}), in the order they are written
    try:
        for store, url in (("dynamodb", f"dynamodb:hot-{run}"), ("sqlite", f"sqlite:{tmp}/claims.db")):
            env = dict(base)
            env["SQS_CLAIM_STORE"] = url
            subprocess.run([payments, "init", "--store", url], env=env, check=True,
                           capture_output=True)
            for i, extra in enumerate(({}, {"AWS_LAMBDA_MAX_CONCURRENCY": "1"})):
                for j, binary in enumerate([consumer] + args.deployed):
                    workloads.append((f"{binary} {store} {extra}", profile_consumer(
                        binary, env, args.n, f"{run}-{store}-c{i}{j}", extra)))
            workloads.append((f"invoke {store}", profile_invoke(
                payments, env, args.n, f"{run}-{store}-i", url, tmp)))
            print(f"   profiled {store}", file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        mr.drop_table(endpoint, f"hot-{run}")

    # The symbols of the profiled binaries, and how many functions share each hash-less path.
    sizes, shared = {}, collections.Counter()
    for b in [consumer, payments] + args.deployed:
        nm = subprocess.run(["nm", "-S", "--defined-only", b], capture_output=True, text=True,
                            check=True).stdout
        for line in nm.splitlines():
            f = line.split()
            if len(f) == 4 and f[2] in "tTwW" and f[3] not in sizes:
                sizes[f[3]] = int(f[1], 16)
    for name in sizes:
        m = re.match(r"^(_ZN.*17h)[0-9a-f]{16}E$", name)
        if m:
            shared[m.group(1)] += 1
    hot, placed = [], set()
    for name, costs in workloads:
        new = [n for n, _ in costs.most_common() if n in sizes and n not in placed]
        placed.update(new)
        hot += new
        print(f"   {name}: {len(new)} more functions, {sum(sizes[n] for n in new) / 1024:.0f} KiB",
              file=sys.stderr)
    patterns, seen, generic = [], set(), []
    for name in hot:
        m = re.match(r"^(_ZN.*17h)[0-9a-f]{16}E$", name)
        pattern = m.group(1) + "*" if m and shared[m.group(1)] == 1 else name
        if pattern not in seen:
            seen.add(pattern)
            patterns.append(pattern)
        if m and shared[m.group(1)] > 1 and m.group(1) + "*" not in seen:
            seen.add(m.group(1) + "*")
            generic.append(m.group(1) + "*")
    # Then each hot generic function's every instance, by its path alone, hottest first: in the
    # profiled builds the instances named above are placed already (a section goes to the
    # first pattern that matches it), and these add the rest at the section's end; in a build
    # whose hashes differ (another target: the arm64 artifact; other features or flags), where
    # no exact name matches, they place the hot paths' code together all the same.
    patterns += generic
    with open(args.out, "w") as f:
        f.write("/* Generated by scripts/hot-text.py: the functions a warm batch of the payments app\n"
                "   runs, hottest first, in one output section before .text, so that the pages they\n"
                "   fault in (64 KiB around each) hold little else. examples/payments/build.rs passes\n"
                "   it to the linker; docs/performance.md says what it saves. */\n")
        f.write("SECTIONS\n{\n  .text.hot :\n  {\n")
        for p in patterns:
            f.write(f"    *(.text.{p} .text.unlikely.{p})\n")
        f.write("  }\n}\nINSERT BEFORE .text;\n")
    kib = sum(sizes[n] for n in hot) / 1024
    print(f"{len(hot)} functions ({kib:.0f} KiB) in {len(patterns)} patterns -> {args.out}")


if __name__ == "__main__":
    main()
