#!/usr/bin/env python3
"""Where a warm `consumer`'s CPU goes, per message: a batch of N fresh payments on DynamoDB Local
under a fake Runtime API, the consumer alone in a cgroup CPU quota of a Lambda's size.

    scripts/profile-consumer.py [--bin PATH] [--n 1000] [--runs 5] [--share 0.58] [--no-callgrind]
    make profile-consumer

1. CPU per message: the process's CPU (user + system, getrusage) for a batch of N, less the
   median of the same process with a batch of 1 (exec, init, the start-up check, one message),
   divided by N - 1; `--runs` alternated runs of each, medians. Under a CPU quota of `--share`
   of a core (cgroup v1 `cpu` controller, as root: Lambda gives 1,769 MB one vCPU, so 0.58 is
   1,024 MB and 0.145 is 256 MB), the consumer alone; DynamoDB Local is not limited (cgroup
   v2's `cpu.max` where v1's controller is absent). Without root or a controller, it runs
   unlimited and says so.
2. Where it goes: the same batch once under valgrind's callgrind (instructions, not seconds;
   repeatable), each function's own instructions summed by crate (the first path segment of its
   demangled name; generic instances count where their code is, `<T as Trait>` by the type's
   crate), as a share of the whole process, less the batch-of-1 run's, and the 25 costliest
   functions per message.

The consumer: `--bin`, default $CARGO_TARGET_DIR/release/consumer (`cargo build --release -p
payments --features cli,rss-floor --bins`, which also builds the `payments` this uses to create the
tables).
"""

import argparse
import collections
import importlib.util
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import uuid

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
spec = importlib.util.spec_from_file_location("mr", os.path.join(ROOT, "scripts", "measure-rss.py"))
mr = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mr)
spec = importlib.util.spec_from_file_location("ht", os.path.join(ROOT, "scripts", "hot-text.py"))
ht = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ht)

CGROUP_CPU = "/sys/fs/cgroup/cpu"
CGROUP_V2 = "/sys/fs/cgroup"


class Quota:
    """A CPU quota the consumer runs in (its children too): a cgroup v1 `cpu` controller's
    `cpu.cfs_quota_us`, else cgroup v2's `cpu.max`; removed by `remove()`."""

    def __init__(self, share, run):
        self.path = None
        if share >= 1 or os.geteuid() != 0:
            return
        if os.path.isdir(CGROUP_CPU):
            path, files = os.path.join(CGROUP_CPU, f"sqs-claim-profile-{run}"), [
                ("cpu.cfs_period_us", "100000"), ("cpu.cfs_quota_us", str(int(share * 100000)))]
        elif os.path.exists(os.path.join(CGROUP_V2, "cgroup.controllers")):
            with open(os.path.join(CGROUP_V2, "cgroup.subtree_control")) as f:
                if "cpu" not in f.read().split():
                    return
            path, files = os.path.join(CGROUP_V2, f"sqs-claim-profile-{run}"), [
                ("cpu.max", f"{int(share * 100000)} 100000")]
        else:
            return
        os.makedirs(path, exist_ok=True)
        self.path = path
        try:
            for name, value in files:
                with open(os.path.join(path, name), "w") as f:
                    f.write(value)
        except OSError:
            self.remove()
            raise

    def wrap(self, cmd):
        if self.path is None:
            return cmd
        # Into the cgroup, then exec: the consumer's every thread is under the quota.
        procs = os.path.join(self.path, "cgroup.procs")
        return ["sh", "-c", f'echo $$ > {procs} && exec "$@"', "sh"] + cmd

    def remove(self):
        if self.path:
            try:
                os.rmdir(self.path)
            except OSError as e:
                print(f"could not remove the cgroup {self.path}: {e}", file=sys.stderr)
            self.path = None


def demangle(names):
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True,
                         check=True).stdout.splitlines()
    return dict(zip(names, out))


def crate_of(name):
    """The crate a demangled function belongs to: its path's first segment; for `<T as
    Trait>::f`, T's crate; `?` when the name is no Rust path (libc, the loader)."""
    n = name
    while n.startswith("<"):
        n = n[1:]
    n = n.lstrip("&*").replace("mut ", "").replace("dyn ", "")
    m = re.match(r"([A-Za-z_][A-Za-z0-9_]*)::", n)
    return m.group(1) if m else "(C: libc, the loader, aws-lc's C)"


def main():
    ap = argparse.ArgumentParser()
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    ap.add_argument("--bin", default=os.path.join(target, "release", "consumer"))
    ap.add_argument("--payments", default=os.path.join(target, "release", "payments"))
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--share", type=float, default=0.58)
    ap.add_argument("--no-callgrind", action="store_true")
    args = ap.parse_args()
    for b in (args.bin, args.payments):
        if not os.path.exists(b):
            sys.exit(f"missing {b}: build with `cargo build --release -p payments --features cli,rss-floor --bins`")
    run = uuid.uuid4().hex[:8]
    table = f"profile-{run}"
    endpoint, env = mr.dynamodb_env(table)
    env["RUST_LOG"] = "info"
    quota = None
    seq = iter(range(10**6))

    def cpu_of(n):
        ev = json.dumps(mr.event(n, f"{run}-{next(seq)}")).encode()
        cmd = quota.wrap([args.bin])
        _, resp = mr.lambda_peak(cmd, env, ev)
        if not resp[0].endswith("/response") or json.loads(resp[1]).get("batchItemFailures"):
            sys.exit(f"the consumer answered {resp[0]}: {resp[1][:500]!r}")
        return mr.CPU[os.path.basename(cmd[0])]

    try:
        made = subprocess.run([args.payments, "init", "--store", f"dynamodb:{table}"], env=env,
                              capture_output=True)
        if made.returncode:
            sys.exit(f"payments init failed: {made.stderr.decode(errors='replace')[-2000:]}")
        quota = Quota(args.share, run)
        where = (f"under a CPU quota of {args.share} of a core" if quota.path
                 else "without a CPU quota (needs root and the cgroup v1 cpu controller)")
        print(f"== the consumer, warm batch of {args.n} fresh payments on DynamoDB Local, {where}")
        one, many = [], []
        cpu_of(1)  # warm-up: the page cache, DynamoDB Local's first requests
        for _ in range(args.runs):
            one.append(cpu_of(1))
            many.append(cpu_of(args.n))
        m1, mn = statistics.median(one), statistics.median(many)
        per = (mn - m1) / (args.n - 1) * 1e6
        print(f"   CPU: batch of 1 {m1 * 1000:.1f} ms, batch of {args.n} {mn * 1000:.1f} ms "
              f"(runs: {', '.join(f'{x * 1000:.0f}' for x in many)}): "
              f"{per:.1f} µs per message")
        if args.no_callgrind:
            return
        if not shutil.which("valgrind"):
            sys.exit("valgrind is needed for the profile (apt-get install valgrind)")
        print(f"== where it goes: callgrind, a batch of {args.n} less a batch of 1 (instructions)")
        costs = {}
        for n in (1, args.n):
            costs[n] = ht.profile_consumer(args.bin, env, n, f"{run}-cg{n}", {}, own=True)
        names = sorted(set(costs[1]) | set(costs[args.n]))
        readable = demangle(names)
        diff = {k: costs[args.n].get(k, 0) - costs[1].get(k, 0) for k in names}
        total = sum(v for v in diff.values() if v > 0)
        per_msg = total / (args.n - 1)
        print(f"   {per_msg:,.0f} instructions per message ({total:,} for {args.n - 1} more messages)")
        by_crate = collections.Counter()
        for k, v in diff.items():
            if v > 0:
                by_crate[crate_of(readable[k])] += v
        print("   by crate (own instructions, share of the per-message total):")
        for crate, v in by_crate.most_common(20):
            print(f"     {crate:<40} {v / total * 100:5.1f} %  {v / (args.n - 1):9,.0f} per message")
        print("   the 25 costliest functions (own instructions per message):")
        for k, v in sorted(diff.items(), key=lambda kv: -kv[1])[:25]:
            name = re.sub(r"::h[0-9a-f]{16}$", "", readable[k])
            print(f"     {v / (args.n - 1):9,.0f}  {name[:150]}")
    finally:
        if quota:
            quota.remove()
        mr.drop_table(endpoint, table)


if __name__ == "__main__":
    main()
