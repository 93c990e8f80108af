"""`make bench`: sqs-claim side by side with Powertools (Python, TypeScript) and a bare SDK loop.

Every implementation processes the same SQS batches (N messages, new keys, then the same batch
again as duplicates) on the same DynamoDB Local, through a delay proxy on loopback that adds 0
or 100 ms per HTTP round trip and counts the requests. Each run is its own process, so its CPU
and memory are its own:

* wall: the median time to process one batch (one `process` call / handler invocation);
* CPU per message: user+sys of the worker process over the timed batches (getrusage inside the
  worker, start-up and warm-up excluded), divided by the messages;
* max RSS: the worker's peak resident set (its VmHWM when it reports), start-up included;
* requests per message: counted at the proxy over the timed batches;
* critical-path round trips: wall / latency at 100 ms (a whole batch's sequential round trips).

Started by scripts/bench/run.sh, which installs Powertools, builds the Rust workers and passes
their paths. Results: a table and the ratios on stdout, OUT_DIR/results.json and results.md.
"""

import argparse
import hashlib
import json
import os
import select
import statistics
import subprocess
import sys
import time
import urllib.request
import uuid

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
IMPLS = ["sqs-claim", "sqs-claim-one-shot", "sqs-claim-credit", "bare-sdk", "powertools-ts", "powertools-py"]
OURS = ("sqs-claim", "sqs-claim-one-shot", "sqs-claim-credit")
LABEL = {
    "sqs-claim": "sqs-claim",
    "sqs-claim-one-shot": "sqs-claim one-shot",
    "sqs-claim-credit": "sqs-claim one-shot + credit",
    "bare-sdk": "bare SDK loop",
    "powertools-ts": "Powertools TS",
    "powertools-py": "Powertools Py",
}
# Untimed batch each worker runs first (new keys), so connection pools are filled and JITs
# warmed as in a warm Lambda environment: the size of the timed batch, capped.
WARMUP_MAX_N = 100
# Lambda gives a function CPU in proportion to its memory (1,769 MB = 1 vCPU): a worker run
# under a cgroup CPU quota feels what a function of that size does. 1 = no quota.
SHARE_NAMES = {1.0: "full CPU", 0.58: "1024 MB (0.58 vCPU)", 0.145: "256 MB (0.145 vCPU)"}
CGROUP_CPU = "/sys/fs/cgroup/cpu"


class CpuShare:
    """A cgroup (v1 `cpu` controller) with a CFS quota, for the worker process alone: DynamoDB
    Local and the proxy stay unconstrained. Removed by `remove()`."""

    def __init__(self, share, run_id):
        self.share = share
        self.path = None
        if share >= 1:
            return
        self.path = os.path.join(CGROUP_CPU, f"sqs-claim-bench-{run_id}-{int(share * 1000)}")
        os.makedirs(self.path, exist_ok=True)
        period = 100_000
        with open(os.path.join(self.path, "cpu.cfs_period_us"), "w") as f:
            f.write(str(period))
        with open(os.path.join(self.path, "cpu.cfs_quota_us"), "w") as f:
            f.write(str(int(share * period)))

    def enter(self):
        """Runs in the child between fork and exec: moves it into the cgroup."""
        if self.path:
            with open(os.path.join(self.path, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))

    def remove(self):
        if self.path and os.path.isdir(self.path):
            try:
                os.rmdir(self.path)
            except OSError as e:
                print(f"   could not remove the cgroup {self.path}: {e}", file=sys.stderr)


def share_name(share):
    return SHARE_NAMES.get(share, f"{share:g} vCPU")


def sqs_event(n, tag):
    records = []
    for i in range(n):
        body = json.dumps(
            {"order_id": f"{tag}-{i}", "account": f"acct-{i % 7}", "amount_cents": 100 + i},
            separators=(",", ":"),
        )
        records.append(
            {
                "messageId": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{tag}-{i}")),
                "receiptHandle": f"rh-{tag}-{i}",
                "body": body,
                "attributes": {
                    "ApproximateReceiveCount": "1",
                    "SentTimestamp": "1700000000000",
                    "SenderId": "AIDAEXAMPLE",
                    "ApproximateFirstReceiveTimestamp": "1700000000001",
                },
                "messageAttributes": {},
                "md5OfBody": hashlib.md5(body.encode()).hexdigest(),
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:payments",
                "awsRegion": "us-east-1",
            }
        )
    return {"Records": records}


class Lines:
    """Line reader over a pipe with a deadline (a hung worker must not hang the bench)."""

    def __init__(self, f):
        self.fd = f.fileno()
        self.buf = b""

    def readline(self, timeout):
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("worker timed out")
            r, _, _ = select.select([self.fd], [], [], left)
            if not r:
                continue
            chunk = os.read(self.fd, 65536)
            if not chunk:
                raise EOFError("worker exited")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode()


class Proxy:
    def __init__(self, exe, upstream, log):
        self.p = subprocess.Popen(
            [exe, "--listen", "127.0.0.1:0", "--upstream", upstream],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
        )
        line = Lines(self.p.stdout).readline(30)
        self.addr = line.split()[1]
        self.url = f"http://{self.addr}"

    def take(self, delay_ms):
        with urllib.request.urlopen(f"{self.url}/__bench/take?delay_ms={delay_ms}", timeout=10) as r:
            return json.load(r)

    def stop(self):
        self.p.stdin.close()
        try:
            self.p.wait(5)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


def label(impl):
    base, _, c = impl.partition("@")
    return LABEL[base] + (f" (concurrency {c})" if c else "")


def worker_cmd(impl, args, events, table):
    base, _, c = impl.partition("@")
    if c:
        # A what-if (`--impls sqs-claim@1000`): the processor with another concurrency.
        return worker_cmd(base, args, events, table) + ["--concurrency", c]
    if impl in OURS:
        return [args.rust_worker, "--impl", impl, "--events", events, "--table", table]
    if impl == "bare-sdk":
        return [args.rust_worker, "--impl", "bare", "--events", events, "--table", table]
    if impl == "powertools-ts":
        js = os.path.join(ROOT, "scripts/bench/powertools_ts.js")
        return ["node", js, "--events", events, "--table", table]
    py = os.path.join(args.out_dir, "venv/bin/python")
    return [py, os.path.join(ROOT, "scripts/bench/powertools_py.py"), "--events", events, "--table", table]


def run_one(impl, args, proxy, env, events, table, latency, log_path, budget_s, share=None):
    with open(log_path, "w") as log:
        p = subprocess.Popen(
            worker_cmd(impl, args, events, table),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            env=env,
            cwd=ROOT,
            preexec_fn=share.enter if share and share.path else None,
        )
        out = Lines(p.stdout)
        result, err = None, None
        try:
            line = out.readline(180)
            if line != "ready":
                raise RuntimeError(f"expected 'ready', got {line[:200]!r}")
            proxy.take(latency)
            p.stdin.write(b"go\n")
            p.stdin.flush()
            result = json.loads(out.readline(budget_s))
            counts = proxy.take(latency)
        except (TimeoutError, EOFError, RuntimeError, ValueError) as e:
            err = str(e)
            p.kill()
        _, status, ru = os.wait4(p.pid, 0)
        if err is None and status != 0:
            err = f"exit status {status}"
    if err:
        return {"error": f"{err} (see {os.path.relpath(log_path, ROOT)})"}
    result["counts"] = counts
    # The worker's own VmHWM: wait4's ru_maxrss would report this driver's RSS for a small
    # worker (Linux keeps the forking parent's high-water mark across exec).
    result["maxrss_kib"] = result.get("vmhwm_kib") or ru.ru_maxrss
    result["process_cpu_s"] = ru.ru_utime + ru.ru_stime
    return result


def fmt_s(s):
    return f"{s * 1e3:.1f} ms" if s < 1 else f"{s:.2f} s"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rust-worker", required=True)
    ap.add_argument("--proxy", required=True)
    ap.add_argument("--out-dir", default=os.path.join(ROOT, ".bench"))
    ap.add_argument("--ns", default="10,100,1000")
    ap.add_argument("--latencies", default="0,100")
    ap.add_argument(
        "--impls",
        default=",".join(IMPLS),
        help="comma-separated; sqs-claim@N or bare-sdk@N adds a what-if with concurrency N",
    )
    ap.add_argument("--repeats", type=int, default=3, help="timed batches per run at 0 ms")
    ap.add_argument(
        "--py-slow-max-n",
        type=int,
        default=1000,
        help="largest N for Powertools-Python at 100 ms (it runs sequentially: 2 round trips per message)",
    )
    ap.add_argument("--processor-bench", help="output of `cargo bench --bench processor` to include")
    ap.add_argument(
        "--cpu-shares",
        default="1,0.58,0.145",
        help="CPU shares of a core for the worker process (a cgroup CPU quota; 1: none): 0.58 is a 1024 MB Lambda, 0.145 a 256 MB one",
    )
    args = ap.parse_args()

    ns = [int(x) for x in args.ns.split(",")]
    latencies = [int(x) for x in args.latencies.split(",")]
    impls = [x for x in args.impls.split(",") if x]
    shares = [float(x) for x in args.cpu_shares.split(",") if x]
    os.makedirs(os.path.join(args.out_dir, "events"), exist_ok=True)
    os.makedirs(os.path.join(args.out_dir, "logs"), exist_ok=True)
    endpoint = os.environ.get("SQS_CLAIM_DYNAMODB_ENDPOINT", "http://127.0.0.1:8000")
    upstream = endpoint.split("://", 1)[-1].rstrip("/")
    run_id = uuid.uuid4().hex[:8]
    started = time.time()
    proxy = Proxy(args.proxy, upstream, open(os.path.join(args.out_dir, "logs/proxy.log"), "w"))
    env = dict(os.environ)
    env.update(
        {
            "AWS_ENDPOINT_URL_DYNAMODB": proxy.url,
            "AWS_ACCESS_KEY_ID": env.get("AWS_ACCESS_KEY_ID", "test"),
            "AWS_SECRET_ACCESS_KEY": env.get("AWS_SECRET_ACCESS_KEY", "test"),
            "AWS_REGION": env.get("AWS_REGION", "us-east-1"),
            "AWS_DEFAULT_REGION": env.get("AWS_REGION", "us-east-1"),
            "AWS_EC2_METADATA_DISABLED": "true",
            "NODE_PATH": os.path.join(args.out_dir, "node/node_modules"),
            # Powertools' own switches, at their defaults, stated so the environment cannot
            # change them: no tracing, no metrics flush, idempotency on.
            "POWERTOOLS_IDEMPOTENCY_DISABLED": "false",
        }
    )
    for k in ("RUST_LOG", "POWERTOOLS_LOG_LEVEL", "AWS_LAMBDA_LOG_LEVEL"):
        env.pop(k, None)
    tables = {impl: f"bench-{run_id}-{impl.replace('@', '-c')}" for impl in impls}

    def events_file(name, warm_tag, batch_tags, n):
        path = os.path.join(args.out_dir, "events", f"{name}.json")
        warmup = sqs_event(min(n, WARMUP_MAX_N), warm_tag)
        with open(path, "w") as f:
            json.dump({"warmup": warmup, "batches": [sqs_event(n, t) for t in batch_tags]}, f)
        return path

    print(f"== make bench: run {run_id}, DynamoDB Local {endpoint} behind the delay proxy at {proxy.addr}")
    print(f"   load average before: {os.getloadavg()[0]:.2f}")
    # DynamoDB Local is a JVM: its first thousands of requests run unoptimised. Every
    # implementation sends its own request shapes once, untimed, before anything is measured.
    print("   warming DynamoDB Local (untimed) ...", flush=True)
    for impl in impls:
        ev = events_file(f"warm-{impl}", f"{run_id}-warm-{impl}-w", [f"{run_id}-warm-{impl}-b"], 300)
        for _ in range(2):
            r = run_one(impl, args, proxy, env, ev, tables[impl], 0, os.path.join(args.out_dir, f"logs/warm-{impl}.log"), 600)
            if "error" in r:
                print(f"   warm-up of {impl} failed: {r['error']}", file=sys.stderr)
                break

    rows = []
    cgroups = {share: CpuShare(share, run_id) for share in shares}
    try:
        run_matrix(args, shares, cgroups, latencies, ns, impls, run_id, proxy, env, tables, events_file, rows)
    finally:
        for cg in cgroups.values():
            cg.remove()
    proxy.stop()
    cleanup(env, endpoint, tables.values())
    finish(args, rows, impls, shares, run_id, started, endpoint, ns, latencies)


def run_matrix(args, shares, cgroups, latencies, ns, impls, run_id, proxy, env, tables, events_file, rows):
    for share in shares:
        cg = cgroups[share]
        for latency in latencies:
            repeats = args.repeats if latency == 0 else 1
            for n in ns:
                tag = f"{run_id}-s{int(share * 1000)}-n{n}-l{latency}"
                batch_tags = [f"{tag}-r{r}" for r in range(repeats)]
                files = {
                    mode: events_file(f"n{n}-l{latency}-{mode}", f"{tag}-{mode}-warm", batch_tags, n)
                    for mode in ("fresh", "dup")
                }
                for impl in impls:
                    if impl == "powertools-py" and latency > 0 and n > args.py_slow_max_n:
                        for mode in ("fresh", "dup"):
                            rows.append({"impl": impl, "n": n, "mode": mode, "latency_ms": latency, "cpu_share": share, "skipped": f"N > --py-slow-max-n {args.py_slow_max_n}"})
                        continue
                    for mode in ("fresh", "dup"):
                        t0 = time.time()
                        log = os.path.join(args.out_dir, f"logs/{impl}-s{int(share * 1000)}-n{n}-l{latency}-{mode}.log")
                        # Budget: 4 round trips per message one after another, plus 60 s, and the
                        # CPU a small share stretches.
                        budget = (60 + repeats * n * 4 * max(latency, 5) / 1000) / min(share, 1) + 60
                        r = run_one(impl, args, proxy, env, files[mode], tables[impl], latency, log, budget, cg)
                        row = {"impl": impl, "n": n, "mode": mode, "latency_ms": latency, "repeats": repeats, "cpu_share": share}
                        if "error" in r:
                            row["error"] = r["error"]
                            print(f"   {impl:16} {share:5} N={n:<5} {mode:5} {latency:>3} ms: FAILED {r['error']}", flush=True)
                            rows.append(row)
                            continue
                        msgs = n * repeats
                        wall = statistics.median(r["walls"])
                        row.update(
                            {
                                "wall_s": wall,
                                "walls_s": r["walls"],
                                "cpu_us_per_msg": r["cpu"] * 1e6 / msgs,
                                "maxrss_mib": r["maxrss_kib"] / 1024,
                                "process_cpu_s": r["process_cpu_s"],
                                "requests_per_msg": r["counts"]["requests"] / msgs,
                                "ops_per_msg": {k: v / msgs for k, v in r["counts"]["ops"].items()},
                                "connections": r["counts"]["connections"],
                                "crit_round_trips": wall / (latency / 1000) if latency else None,
                                "ok": r["ok"],
                                "failed": r["failed"],
                                "duplicate": r.get("duplicate"),
                                "config": r.get("config") or None,
                                "concurrency": r.get("concurrency"),
                            }
                        )
                        problems = []
                        if r["ok"] != msgs or r["failed"]:
                            problems.append(f"{r['ok']} of {msgs} ok, {r['failed']} failed")
                        if mode == "dup" and r.get("duplicate") is not None and r["duplicate"] != msgs:
                            problems.append(f"{r['duplicate']} of {msgs} seen as duplicates")
                        if problems:
                            row["problems"] = problems
                        rows.append(row)
                        print(
                            f"   {impl:16} {share:5} N={n:<5} {mode:5} {latency:>3} ms: wall {fmt_s(wall):>9}  "
                            f"cpu/msg {row['cpu_us_per_msg']:7.0f} us  rss {row['maxrss_mib']:6.1f} MiB  "
                            f"req/msg {row['requests_per_msg']:.2f}  ({time.time() - t0:.0f} s)"
                            + (f"  PROBLEM: {'; '.join(problems)}" if problems else ""),
                            flush=True,
                        )


def finish(args, rows, impls, shares, run_id, started, endpoint, ns, latencies):
    processor = parse_processor_bench(args.processor_bench)
    meta = {
        "run_id": run_id,
        "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)),
        "duration_s": round(time.time() - started, 1),
        "load_average_after": round(os.getloadavg()[0], 2),
        "endpoint": endpoint,
        "ns": ns,
        "latencies_ms": latencies,
        "repeats_at_0ms": args.repeats,
        "py_slow_max_n": args.py_slow_max_n,
        "versions": versions(args),
        "cpu_shares": shares,
        "sqs_claim_config": next((r["config"] for r in rows if r.get("impl") == "sqs-claim" and r.get("config")), None),
        "bare_concurrency": next((r["concurrency"] for r in rows if r.get("impl") == "bare-sdk" and "concurrency" in r), None),
        "processor_overhead": processor,
    }
    md = "".join(render([r for r in rows if r.get("cpu_share", 1.0) == share], meta, impls, share) for share in shares)
    svg = wall_chart(rows, impls, shares)
    with open(os.path.join(args.out_dir, "wall.svg"), "w") as f:
        f.write(svg)
    print()
    print(md)
    with open(os.path.join(args.out_dir, "results.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    with open(os.path.join(args.out_dir, "results.md"), "w") as f:
        f.write(md)
    print(f"written: {os.path.relpath(args.out_dir, ROOT)}/results.json, results.md, wall.svg ({meta['duration_s']:.0f} s)")
    if any("error" in r or r.get("problems") for r in rows):
        sys.exit(1)


def cleanup(env, endpoint, tables):
    """Drops this run's tables (DynamoDB Local keeps them in memory, shared with the tests)."""
    code = (
        "import boto3, sys\n"
        "c = boto3.client('dynamodb', endpoint_url=sys.argv[1])\n"
        "for t in sys.argv[2:]:\n"
        "    try: c.delete_table(TableName=t)\n"
        "    except Exception: pass\n"
    )
    py = os.path.join(os.path.dirname(env["NODE_PATH"]), "..", "venv/bin/python")
    subprocess.run([py, "-c", code, endpoint, *tables], env=env, check=False)


def parse_processor_bench(path):
    if not path or not os.path.exists(path):
        return None
    with open(path) as f:
        text = f.read()
    for line in text.splitlines():
        if "full processor" in line and "µs/msg added" in line:
            added = line.rsplit("(", 1)[1].split("µs/msg")[0].strip()
            return {"line": line.strip(), "us_per_msg_added": float(added)}
    return {"line": None}


def versions(args):
    def out(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
        except OSError:
            return None

    py = os.path.join(args.out_dir, "venv/bin/python")
    node_mods = os.path.join(args.out_dir, "node/node_modules")

    def npm_version(pkg):
        try:
            with open(os.path.join(node_mods, pkg, "package.json")) as f:
                return json.load(f)["version"]
        except OSError:
            return None

    return {
        "rustc": out(["rustc", "--version"]),
        "node": out(["node", "--version"]),
        "python": out([py, "--version"]),
        "aws-lambda-powertools (py)": out([py, "-c", "from importlib.metadata import version as v; print(v('aws-lambda-powertools'))"]),
        "boto3": out([py, "-c", "from importlib.metadata import version as v; print(v('boto3'))"]),
        "@aws-lambda-powertools/batch": npm_version("@aws-lambda-powertools/batch"),
        "@aws-lambda-powertools/idempotency": npm_version("@aws-lambda-powertools/idempotency"),
        "@aws-sdk/client-dynamodb": npm_version("@aws-sdk/client-dynamodb"),
        "git": out(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"]),
    }


def render(rows, meta, impls, share=1.0):
    ok = [r for r in rows if "wall_s" in r]
    by = {(r["impl"], r["n"], r["mode"], r["latency_ms"]): r for r in ok}
    lines = []
    lines.append(f"### Side by side on DynamoDB Local, worker at {share_name(share)} (run {meta['run_id']}, {meta['started']}, {meta['duration_s']:.0f} s)")
    lines.append("")
    lines.append(
        "Wall: median per batch. CPU/msg: user+sys of the worker process over the timed batches. "
        "RSS: the worker's peak. req/msg: HTTP requests at the proxy. crit RTs: wall / latency "
        "(sequential round trips of the whole batch; 100 ms runs only)."
    )
    lines.append("")
    lines.append("| impl | N | batch | +latency | wall | crit RTs | CPU/msg | max RSS | req/msg |")
    lines.append("|---|---:|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        if "wall_s" not in r:
            why = r.get("error") or r.get("skipped")
            lines.append(f"| {label(r['impl'])} | {r['n']} | {r['mode']} | {r['latency_ms']} ms | — ({why}) | | | | |")
            continue
        rt = f"{r['crit_round_trips']:.1f}" if r["crit_round_trips"] is not None else "—"
        lines.append(
            f"| {label(r['impl'])} | {r['n']} | {r['mode']} | {r['latency_ms']} ms | {fmt_s(r['wall_s'])} | {rt} | "
            f"{r['cpu_us_per_msg']:.0f} µs | {r['maxrss_mib']:.1f} MiB | {r['requests_per_msg']:.2f} |"
        )
    lines.append("")
    for us in [i for i in OURS if i in impls]:
        others = [i for i in impls if not i.startswith("sqs-claim")]
        if not others:
            continue
        lines.append(f"#### Ratios: the other implementation's figure / {label(us)}'s (above 1: {label(us)} is better)")
        lines.append("")
        head = "| N | batch | +latency | " + " | ".join(
            f"wall vs {label(o)} | CPU vs {label(o)}" for o in others
        ) + " | RSS vs Powertools TS |"
        lines.append(head)
        lines.append("|---:|---|---:|" + "---:|" * (2 * len(others) + 1))
        keys = sorted({(r["n"], r["mode"], r["latency_ms"]) for r in ok}, key=lambda k: (k[2], k[0], k[1] != "fresh"))
        for n, mode, lat in keys:
            ours = by.get((us, n, mode, lat))
            if not ours:
                continue
            cells = []
            for o in others:
                theirs = by.get((o, n, mode, lat))
                if theirs:
                    cells.append(f"x{theirs['wall_s'] / ours['wall_s']:.2f}")
                    cells.append(f"x{theirs['cpu_us_per_msg'] / ours['cpu_us_per_msg']:.1f}")
                else:
                    cells += ["—", "—"]
            ts = by.get(("powertools-ts", n, mode, lat))
            cells.append(f"x{ts['maxrss_mib'] / ours['maxrss_mib']:.1f}" if ts else "—")
            lines.append(f"| {n} | {mode} | {lat} ms | " + " | ".join(cells) + " |")
        lines.append("")
    lines += goals(by, meta)
    lines.append("")
    lines.append("Settings:")
    lines.append(f"- sqs-claim: builder defaults except the key (`/order_id`): `{meta['sqs_claim_config']}`")
    lines.append(f"- bare SDK loop: concurrency {meta['bare_concurrency']} (the processor's default, read from its builder)")
    lines.append(
        "- Powertools: `BatchProcessor` + `DynamoDBPersistenceLayer` with defaults, key "
        "`powertools_json(body).order_id`; TS runs the batch in parallel (`Promise.all`, the "
        "SDK's default socket pool), Python one record after another."
    )
    lines.append(f"- timed batches per run: {meta['repeats_at_0ms']} at 0 ms, 1 at 100 ms; Powertools-Python at 100 ms up to N = {meta['py_slow_max_n']}")
    lines.append(f"- load average after the run: {meta['load_average_after']} (2 cores, shared)")
    lines.append(f"- versions: {json.dumps(meta['versions'])}")
    return "\n".join(lines) + "\n"


def goals(by, meta):
    out = []
    for us in ("sqs-claim-credit", "sqs-claim-one-shot", "sqs-claim"):
        if any(k[0] == us for k in by):
            out += goals_of(us, by, meta)
    return out


def goals_of(us, by, meta):
    out = [f"#### Goals (issues 10 and 18): {label(us)}", ""]
    walls, cpus, rss = [], [], []
    for (impl, n, mode, lat), r in by.items():
        if impl != us:
            continue
        ts = by.get(("powertools-ts", n, mode, lat))
        rss.append(r["maxrss_mib"])
        if ts:
            walls.append((ts["wall_s"] / r["wall_s"], n, mode, lat))
            cpus.append((ts["cpu_us_per_msg"] / r["cpu_us_per_msg"], n, mode, lat))

    def verdict(name, vals, goal):
        if not vals:
            return f"- {name}: not measured"
        worst = min(vals)
        state = "met" if worst[0] >= goal else "MISSED"
        return f"- {name} (goal ≥ x{goal}): {state}; worst x{worst[0]:.2f} at N={worst[1]} {worst[2]} {worst[3]} ms"

    out.append(verdict("wall vs Powertools-TS at every N and latency", walls, 3))
    out.append(verdict("CPU/msg vs Powertools-TS", cpus, 10))
    if rss:
        state = "met" if max(rss) <= 16 else "MISSED"
        out.append(f"- max RSS ≤ 16 MiB: {state}; largest {max(rss):.1f} MiB")
    packed = [r for (i, n, m, l), r in by.items() if i == us and m == "fresh" and n == 1000 and us == "sqs-claim-credit"]
    if packed:
        req = max(r["requests_per_msg"] for r in packed)
        state = "met" if req <= 0.05 else "MISSED"
        out.append(f"- requests per fresh message at N = 1000, effects on distinct items, ≤ 0.05: {state}; {req:.3f}")
    fresh = [r for (i, n, m, l), r in by.items() if i == us and m == "fresh"]
    if fresh:
        req = max(r["requests_per_msg"] for r in fresh)
        state = "met" if req <= 1.0 else "MISSED"
        out.append(f"- 1 request per fresh message: {state}; {label(us)} sends up to {req:.2f}")
    p = meta.get("processor_overhead")
    if p and p.get("us_per_msg_added") is not None:
        state = "met" if p["us_per_msg_added"] <= 1.0 else "MISSED"
        out.append(f"- in-process overhead ≤ 1 µs/msg (memory store, `benches/processor.rs`): {state}; {p['us_per_msg_added']:.1f} µs/msg")
    return out



def wall_chart(rows, impls, shares):
    """Wall per batch against N (fresh batches, no added latency), one line per implementation
    and CPU share, log-log: an SVG of its own (no plotting library)."""
    import math

    ok = [r for r in rows if "wall_s" in r and r["mode"] == "fresh" and r["latency_ms"] == 0]
    ns = sorted({r["n"] for r in ok}) or [10]
    walls = [r["wall_s"] for r in ok] or [1.0]
    w, h, left, right, top, bottom = 760, 440, 70, 230, 30, 50
    x0, x1 = math.log10(min(ns)), math.log10(max(ns)) if max(ns) > min(ns) else math.log10(min(ns)) + 1
    y0, y1 = math.floor(math.log10(min(walls))), math.ceil(math.log10(max(walls)))
    if y1 == y0:
        y1 += 1

    def x(n):
        return left + (math.log10(n) - x0) / (x1 - x0) * (w - left - right)

    def y(s):
        return h - bottom - (math.log10(s) - y0) / (y1 - y0) * (h - top - bottom)

    colors = {
        "sqs-claim": "#1f77b4", "sqs-claim-one-shot": "#2ca02c", "sqs-claim-credit": "#17becf",
        "bare-sdk": "#7f7f7f", "powertools-ts": "#d62728", "powertools-py": "#ff7f0e",
    }
    dashes = {1.0: "", 0.58: "6,3", 0.145: "2,3"}
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{left}" y="18" font-size="14">Wall per fresh batch against N (DynamoDB Local, no added latency; log-log)</text>']
    for e in range(int(y0), int(y1) + 1):
        yy = y(10 ** e)
        out.append(f'<line x1="{left}" y1="{yy:.1f}" x2="{w - right}" y2="{yy:.1f}" stroke="#ddd"/>')
        label_s = f"{10 ** e * 1000:g} ms" if e < 0 else f"{10 ** e:g} s"
        out.append(f'<text x="{left - 6}" y="{yy + 4:.1f}" text-anchor="end">{label_s}</text>')
    for n in ns:
        xx = x(n)
        out.append(f'<line x1="{xx:.1f}" y1="{top}" x2="{xx:.1f}" y2="{h - bottom}" stroke="#ddd"/>')
        out.append(f'<text x="{xx:.1f}" y="{h - bottom + 16}" text-anchor="middle">N = {n}</text>')
    legend_y = top
    for impl in impls:
        for share in shares:
            pts = sorted((r["n"], r["wall_s"]) for r in ok if r["impl"] == impl and r.get("cpu_share", 1.0) == share)
            if not pts:
                continue
            color = colors.get(impl.partition("@")[0], "#000")
            dash = dashes.get(share, "4,2")
            path = " ".join(f"{x(n):.1f},{y(s):.1f}" for n, s in pts)
            out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2" stroke-dasharray="{dash}"/>')
            for n, s in pts:
                out.append(f'<circle cx="{x(n):.1f}" cy="{y(s):.1f}" r="3" fill="{color}"/>')
            lx = w - right + 12
            out.append(f'<line x1="{lx}" y1="{legend_y}" x2="{lx + 24}" y2="{legend_y}" stroke="{color}" stroke-width="2" stroke-dasharray="{dash}"/>')
            out.append(f'<text x="{lx + 30}" y="{legend_y + 4}">{label(impl)}, {share_name(share)}</text>')
            legend_y += 16
    out.append("</svg>")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    main()
