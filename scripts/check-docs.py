#!/usr/bin/env python3
"""Runs the command blocks of the documentation, so that what it tells a user to run works.

Usage: scripts/check-docs.py [--list] [FILE...]

Reads README.md, cli/README.md, events/README.md and docs/*.md (or the FILEs given), and their
fenced blocks:

* ```console blocks: lines `$ COMMAND` (a command ending in `\\` goes on, on the next line), each
  followed by the output it prints (stdout and stderr together). Each command runs and its
  output must match: line by line, trailing spaces ignored; a line `...` matches any number of
  lines. The commands of a block run in one shell, in order (an `export` holds for the next);
  their exit status is not checked, their output is. Runs unless marked `skip`.
* ```sh and ```bash blocks: the line before the block must be a mark,
      <!-- check-docs: run -->            the block runs, and must exit 0;
      <!-- check-docs: skip REASON -->    it does not (it needs an AWS account, takes long, ...).
  A block with no mark is an error: a new block says whether CI runs it.

Every block runs in a fresh copy of the work tree's files (tracked, and new files not ignored)
in a temp dir, as a new clone would: no `.sqs-claim/`, no `.standins/`. The environment is the
caller's without its AWS_*, SQS_CLAIM_* (but SQS_CLAIM_CACHE) and RUST_LOG variables. cargo
builds into CARGO_TARGET_DIR (default: the work tree's target/, so a build is shared; the copy's
`target` is a link to it), and $CARGO_TARGET_DIR/debug is first on PATH, as if the user had
installed `payments` and `sqs-claim` (`make check-docs` builds them first). Blocks run with
bash (`set -eo pipefail`, aliases on).

--list prints each block and its mark without running anything, and still fails on an unmarked
block (cheap: `make lint` runs it). Exit 0 when every block passed; 1 otherwise.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
MARK = re.compile(r"^<!--\s*check-docs:\s*(run|skip)\b\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)(`{3,})\s*([^`\s]*)\s*$")
SHELL = {"sh", "bash", "shell"}
TIMEOUT = 1800  # a block that builds from cold on two cores


def doc_files():
    files = ["README.md", "cli/README.md", "events/README.md"]
    files += sorted("docs/" + f for f in os.listdir(os.path.join(ROOT, "docs")) if f.endswith(".md"))
    return files


class Block:
    def __init__(self, path, line, lang, body, mark, reason):
        self.path, self.line, self.lang, self.body = path, line, lang, body
        self.mark, self.reason = mark, reason

    def where(self):
        return f"{self.path}:{self.line}"


def parse(path):
    """The blocks of one Markdown file, and the errors in its marks."""
    with open(os.path.join(ROOT, path)) as f:
        lines = f.read().split("\n")
    blocks, errors = [], []
    i = 0
    pending = None  # (line number, kind, reason) of a mark waiting for its block
    while i < len(lines):
        line = lines[i]
        m = MARK.match(line.strip())
        if m:
            if pending:
                errors.append(f"{path}:{pending[0]}: a check-docs mark with no block after it")
            pending = (i + 1, m.group(1), m.group(2))
            i += 1
            continue
        f = FENCE.match(line)
        if not f or not f.group(3):
            if line.strip() and pending:
                errors.append(f"{path}:{pending[0]}: a check-docs mark must be the line before its block")
                pending = None
            i += 1
            continue
        indent, ticks, info = f.group(1), f.group(2), f.group(3)
        lang = info.split(",")[0].lower()
        start = i + 1
        body = []
        i += 1
        while i < len(lines) and lines[i].strip() != ticks:
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i].lstrip())
            i += 1
        i += 1  # the closing fence
        mark, reason = (pending[1], pending[2]) if pending else (None, "")
        if pending and lang not in SHELL | {"console"}:
            errors.append(f"{path}:{pending[0]}: a check-docs mark before a ```{lang} block (only sh, bash, console run)")
        pending = None
        if lang in SHELL or lang == "console":
            if lang in SHELL and mark is None:
                errors.append(f"{path}:{start}: ```{lang} block with no mark on the line before "
                              "(<!-- check-docs: run --> or <!-- check-docs: skip REASON -->)")
            if mark == "skip" and not reason:
                errors.append(f"{path}:{start}: `check-docs: skip` needs a reason")
            default = "run" if lang == "console" else "unmarked"
            blocks.append(Block(path, start, lang, body, mark or default, reason))
    if pending:
        errors.append(f"{path}:{pending[0]}: a check-docs mark with no block after it")
    return blocks, errors


def console_steps(body):
    """[(command, [expected output lines])] of a console block."""
    steps = []
    i = 0
    while i < len(body):
        line = body[i]
        if not line.startswith("$ "):
            raise ValueError(f"line {i + 1} of the block: output before any `$ ` command")
        cmd = line[2:]
        i += 1
        while cmd.endswith("\\") and i < len(body):
            cmd += "\n" + body[i]
            i += 1
        out = []
        while i < len(body) and not body[i].startswith("$ "):
            out.append(body[i])
            i += 1
        while out and not out[-1].strip():
            out.pop()
        steps.append((cmd, out))
    return steps


def matches(expected, actual):
    """Line by line; a line `...` matches any number of lines (none included)."""
    expected = [e.rstrip() for e in expected]
    actual = [a.rstrip() for a in actual]
    memo = {}

    def go(e, a):
        if (e, a) in memo:
            return memo[(e, a)]
        if e == len(expected):
            r = a == len(actual)
        elif expected[e] == "...":
            r = any(go(e + 1, k) for k in range(a, len(actual) + 1))
        else:
            r = a < len(actual) and expected[e] == actual[a] and go(e + 1, a + 1)
        memo[(e, a)] = r
        return r

    return go(0, 0)


def work_tree_files():
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         cwd=ROOT, check=True, capture_output=True).stdout
    return [p for p in out.decode().split("\0") if p]


def fresh_copy(files, target_dir):
    tmp = tempfile.mkdtemp(prefix="check-docs-")
    for p in files:
        src = os.path.join(ROOT, p)
        if not os.path.lexists(src):
            continue  # deleted in the work tree, not yet in git
        dst = os.path.join(tmp, p)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if os.path.islink(src):
            os.symlink(os.readlink(src), dst)
        elif os.path.isfile(src):
            shutil.copy2(src, dst)
    os.symlink(target_dir, os.path.join(tmp, "target"))
    return tmp


def environment(target_dir):
    env = {k: v for k, v in os.environ.items()
           if not (k.startswith("AWS_") or (k.startswith("SQS_CLAIM_") and k != "SQS_CLAIM_CACHE")
                   or k == "RUST_LOG")}
    env["CARGO_TARGET_DIR"] = target_dir
    env["PATH"] = os.path.join(target_dir, "debug") + os.pathsep + env.get("PATH", "")
    env["CARGO_TERM_COLOR"] = "never"
    env["NO_COLOR"] = "1"
    return env


PRELUDE = "set -eo pipefail\nshopt -s expand_aliases\n"
STEP = "@@check-docs-step@@"


def run_shell(script, cwd, env):
    with tempfile.NamedTemporaryFile("w", suffix=".sh", delete=False) as f:
        f.write(PRELUDE + script + "\n")
        name = f.name
    try:
        p = subprocess.run(["bash", name], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=TIMEOUT)
        return p.returncode, p.stdout.decode(errors="replace")
    finally:
        os.unlink(name)


def run_block(block, files, target_dir, env):
    """None if the block passed, else what went wrong."""
    tmp = fresh_copy(files, target_dir)
    try:
        if block.lang == "console":
            try:
                steps = console_steps(block.body)
            except ValueError as e:
                return str(e)
            # One shell for the block (a variable set by one command is seen by the next), a
            # marker line after each command to cut its output at.
            script = "set +e\n" + "".join(
                f"{cmd}\nprintf '\\n{STEP}%s\\n' \"$?\"\n" for cmd, _ in steps)
            _, out = run_shell(script, tmp, env)
            parts = re.split(rf"\n?{STEP}(\d+)\n", out)
            for n, (cmd, expected) in enumerate(steps):
                if 2 * n + 1 >= len(parts):
                    return f"`$ {cmd}` did not finish (the shell stopped):\n" + indent(parts[-1].split("\n"))
                printed, code = parts[2 * n], parts[2 * n + 1]
                actual = printed.rstrip("\n").split("\n") if printed.strip() else []
                if not matches(expected, actual):
                    return (f"`$ {cmd}` (exit {code}) printed:\n" + indent(actual)
                            + "\n  the block shows:\n" + indent(expected))
            return None
        code, out = run_shell("\n".join(block.body), tmp, env)
        if code != 0:
            tail = out.rstrip("\n").split("\n")[-30:]
            return f"exit {code}; the last lines:\n" + indent(tail)
        return None
    except subprocess.TimeoutExpired:
        return f"still running after {TIMEOUT} s"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def indent(lines):
    return "\n".join("    | " + l for l in lines)


def main(argv):
    args = argv[1:]
    list_only = "--list" in args
    files = [a for a in args if a != "--list"] or doc_files()
    unknown = [a for a in files if a.startswith("-")]
    if unknown:
        print(__doc__, file=sys.stderr)
        return 2
    blocks, errors = [], []
    for path in files:
        b, e = parse(path)
        blocks += b
        errors += e
    if list_only:
        for b in blocks:
            why = f": {b.reason}" if b.reason else ""
            print(f"{b.where()}  {b.lang:8} {b.mark}{why}")
    for e in errors:
        print(f"error: {e}", file=sys.stderr)
    runnable = [b for b in blocks if b.mark == "run"]
    if list_only:
        print(f"check-docs: {len(blocks)} blocks, {len(runnable)} to run, "
              f"{len(blocks) - len(runnable)} skipped; {len(errors)} errors", file=sys.stderr)
        return 1 if errors else 0
    target_dir = os.path.abspath(os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target"))
    os.makedirs(target_dir, exist_ok=True)
    env = environment(target_dir)
    tree = work_tree_files()
    failed = 0
    started = time.monotonic()
    for b in runnable:
        t = time.monotonic()
        problem = run_block(b, tree, target_dir, env)
        secs = time.monotonic() - t
        if problem:
            failed += 1
            print(f"FAIL {b.where()} ({b.lang}, {secs:.1f} s): {problem}", file=sys.stderr)
        else:
            print(f"ok   {b.where()} ({b.lang}, {secs:.1f} s)", file=sys.stderr)
    total = time.monotonic() - started
    print(f"check-docs: {len(runnable) - failed} of {len(runnable)} blocks passed "
          f"({len(blocks) - len(runnable)} skipped) in {total:.0f} s", file=sys.stderr)
    return 1 if failed or errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
