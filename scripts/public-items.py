#!/usr/bin/env python3
"""Counts the public items of a crate from rustdoc's JSON output.

Usage: scripts/public-items.py [--breakdown] [--features F1,F2 | --default-features] [--max N] [PACKAGE ...]
       scripts/public-items.py --write | --check [--base REF] [PACKAGE ...]
       (default: sqs-claim sqs-claim-cli sqs-claim-testkit, all features)

Builds `cargo rustdoc -p PACKAGE --lib --all-features -- --output-format json` (rustdoc's JSON
is unstable: RUSTC_BOOTSTRAP=1 lets the stable toolchain emit it) and counts the items a user
can name: every item of the crate reachable from its root through public modules and
re-exports (modules, types, traits, functions, methods, constants, fields, variants), each
once. `--breakdown` also lists the count per owner (the type, trait or module holding each
item), largest first. `--features F1,F2` counts the face with those features alone (no default
features), `--default-features` with the crate's defaults: what a user with that build sees.
`--max N` fails (exit status 1) when a package counts more than N: `make lint` keeps the
library's default build (`dynamodb`) at most 400 items so.

The public API kept in the repository (all features):

  scripts/public-items.py --write   writes api/PACKAGE.txt for each package: every public item
                                    path a user can name, one a line, sorted, with its kind
  scripts/public-items.py --check   (in `make lint`) fails when api/PACKAGE.txt differs from the
                                    code (run --write and commit the diff with the change), or
                                    when an item removed from a list since its base is not
                                    named in CHANGELOG.md's top `## Unreleased` section

An item is named by its last two path segments (`ApiGatewayRequest::method`, `settings::read`),
in backticks or not. Added items need not be named (CHANGELOG says what a user gains in its own
words); a removed one must be: it breaks someone's build. The base is `--base REF`, else
$SQS_CLAIM_API_BASE, else the newest tag `v*`, else the commit that first added the list (the
lists began before the first release: everything removed since then is unreleased).
"""
import json
import os
import re
import subprocess
import sys
from collections import Counter, deque

ROOT = os.environ.get("REPO") or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def doc_json(package, features=None):
    """`features`: None for all features, "" for the crate's defaults, else a comma list."""
    env = dict(os.environ, RUSTC_BOOTSTRAP="1")
    target = env.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    if features is None:
        chosen = ["--all-features"]
    elif features == "":
        chosen = []
    else:
        chosen = ["--no-default-features", "--features", features]
    subprocess.run(
        ["cargo", "rustdoc", "-q", "-p", package, "--lib", *chosen, "--",
         "-Z", "unstable-options", "--output-format", "json"],
        cwd=ROOT, env=env, check=True)
    name = package.replace("-", "_")
    with open(os.path.join(target, "doc", f"{name}.json")) as f:
        return json.load(f)


def reachable(doc, owners=None):
    """Ids of the crate's items a user can reach from the root, and their kinds.

    With `owners` (a Counter), each counted item is also tallied under its owner: the type,
    trait or module that holds it (a type, trait or module is tallied under itself)."""
    index = doc["index"]
    seen, kinds = set(), Counter()
    stack = [(doc["root"], "crate")]
    while stack:
        item_id, owner = stack.pop()
        key = str(item_id)
        if key in seen or key not in index:
            continue
        item = index[key]
        if item.get("crate_id", 0) != 0:
            continue
        vis = item.get("visibility")
        inner = item.get("inner", {})
        kind = next(iter(inner), "?")
        is_impl_child = kind in ("function", "assoc_const", "assoc_type") and vis == "default"
        if vis != "public" and not is_impl_child and kind not in ("impl", "variant", "module"):
            continue
        seen.add(key)
        if kind in ("module", "struct", "enum", "union", "trait"):
            name = item.get("name") or "crate"
            owner = name if owner == "crate" else f"{owner}::{name}"
        if kind not in ("impl", "use"):
            kinds[kind] += 1
            if owners is not None:
                owners[owner] += 1
        body = inner.get(kind) or {}
        children = []
        if kind == "module":
            children.extend(body.get("items", []))
        elif kind == "use":
            if body.get("id") is not None:
                children.append(body["id"])
        elif kind in ("struct", "enum", "union", "trait"):
            children.extend(body.get("impls", []) if kind != "trait" else [])
            children.extend(body.get("items", []))
            children.extend(body.get("variants", []))
            fields = body.get("kind", {})
            if isinstance(fields, dict):
                for v in fields.values():
                    if isinstance(v, dict):
                        children.extend(v.get("fields", []))
                    elif isinstance(v, list):
                        children.extend(x for x in v if x is not None)
        elif kind == "impl":
            if body.get("trait") is None:  # inherent methods only: trait impls add no names
                children.extend(body.get("items", []))
        elif kind == "variant":
            vk = body.get("kind", {})
            if isinstance(vk, dict):
                for v in vk.values():
                    if isinstance(v, dict):
                        children.extend(v.get("fields", []))
                    elif isinstance(v, list):
                        children.extend(x for x in v if x is not None)
        stack.extend((c, owner) for c in children)
    return kinds


def item_paths(doc, crate):
    """Every public path of the crate's items a user can name, as `path (kind)` lines.

    Breadth-first from the root, so an item re-exported nearer the root is expanded there
    first (its methods and fields listed under that path); each re-export path of a named
    item is listed. A renaming `use` names the item by its new name; a glob `use` puts the
    module's items beside it."""
    index = doc["index"]
    lines, expanded = set(), set()
    queue = deque([(doc["root"], None, None)])
    while queue:
        item_id, parent, rename = queue.popleft()
        key = str(item_id)
        if key not in index:
            continue
        item = index[key]
        if item.get("crate_id", 0) != 0:
            continue
        vis = item.get("visibility")
        inner = item.get("inner", {})
        kind = next(iter(inner), "?")
        is_impl_child = kind in ("function", "assoc_const", "assoc_type") and vis == "default"
        if vis != "public" and not is_impl_child and kind not in ("impl", "variant", "module"):
            continue
        if kind == "module" and parent is not None and vis != "public":
            continue
        body = inner.get(kind) or {}
        if kind == "use":
            target = body.get("id")
            if target is None:
                continue
            if body.get("is_glob"):
                target_item = index.get(str(target), {})
                items = (target_item.get("inner", {}).get("module") or {}).get("items", [])
                queue.extend((c, parent, None) for c in items)
            else:
                queue.append((target, parent, body.get("name")))
            continue
        if kind == "impl":
            if body.get("trait") is None:  # inherent items only: trait impls add no names
                queue.extend((c, parent, None) for c in body.get("items", []))
            continue
        name = rename or item.get("name") or crate
        path = crate if parent is None else f"{parent}::{name}"
        if parent is not None:
            lines.add(f"{path} ({kind})")
        if key in expanded:
            continue
        expanded.add(key)
        children = []
        if kind == "module":
            children.extend(body.get("items", []))
        elif kind in ("struct", "enum", "union", "trait"):
            if kind != "trait":
                children.extend(body.get("impls", []))
            children.extend(body.get("items", []))
            children.extend(body.get("variants", []))
            fields = body.get("kind", {})
            if isinstance(fields, dict):
                for v in fields.values():
                    if isinstance(v, dict):
                        children.extend(v.get("fields", []))
                    elif isinstance(v, list):
                        children.extend(x for x in v if x is not None)
        elif kind == "variant":
            vk = body.get("kind", {})
            if isinstance(vk, dict):
                for v in vk.values():
                    if isinstance(v, dict):
                        children.extend(v.get("fields", []))
                    elif isinstance(v, list):
                        children.extend(x for x in v if x is not None)
        queue.extend((c, path, None) for c in children)
    return sorted(lines)


API_DIR = os.path.join(ROOT, "api")


def api_file(package):
    return os.path.join(API_DIR, f"{package}.txt")


def api_text(lines, package):
    head = (f"# The public API of {package} (all features): every item path a user can name.\n"
            "# Written by scripts/public-items.py --write; `make lint` checks it against the code.\n")
    return head + "".join(line + "\n" for line in lines)


def read_lines(text):
    return [l for l in text.splitlines() if l and not l.startswith("#")]


def git(*args):
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)


def base_ref(given):
    if given:
        return given
    if os.environ.get("SQS_CLAIM_API_BASE"):
        return os.environ["SQS_CLAIM_API_BASE"]
    tags = git("tag", "--list", "v*", "--sort=-creatordate").stdout.split()
    if tags:
        return tags[0]
    first = git("log", "--diff-filter=A", "--format=%H", "--", "api/sqs-claim.txt").stdout.split()
    return first[-1] if first else None


def unreleased_section():
    with open(os.path.join(ROOT, "CHANGELOG.md")) as f:
        text = f.read()
    m = re.search(r"^## Unreleased.*?$(.*?)(?=^## |\Z)", text, re.M | re.S)
    return m.group(1) if m else ""


def item_name(line):
    """`a::b::C::m (function)` -> `C::m`: how CHANGELOG names an item."""
    path = line.split(" (", 1)[0]
    return "::".join(path.split("::")[-2:])


def named_in(text, name):
    # `idempotency::ApiGatewayRequest::method()` names `ApiGatewayRequest::method` too.
    return re.search(r"(?<![\w])" + re.escape(name) + r"(?![\w])", text) is not None


def write_or_check(packages, check, base):
    os.makedirs(API_DIR, exist_ok=True)
    failures = []
    ref = base_ref(base) if check else None
    unreleased = unreleased_section() if check else ""
    for package in packages:
        lines = item_paths(doc_json(package), package.replace("-", "_"))
        path = api_file(package)
        want = api_text(lines, package)
        if not check:
            with open(path, "w") as f:
                f.write(want)
            print(f"{os.path.relpath(path, ROOT)}: {len(lines)} items")
            continue
        have = open(path).read() if os.path.exists(path) else ""
        if have != want:
            old = set(read_lines(have))
            added = [l for l in lines if l not in old]
            gone = sorted(old - set(lines))
            detail = "".join(f"\n  + {l}" for l in added[:20]) + "".join(
                f"\n  - {l}" for l in gone[:20])
            failures.append(
                f"{os.path.relpath(path, ROOT)} is not the code's public API "
                f"({len(added)} added, {len(gone)} removed): run scripts/public-items.py --write "
                f"and commit the diff with the change{detail}")
            continue
        if ref is None:
            continue
        shown = git("show", f"{ref}:api/{package}.txt")
        if shown.returncode != 0:
            continue  # the package's list began after the base
        removed = sorted(set(read_lines(shown.stdout)) - set(lines))
        unnamed = [l for l in removed if not named_in(unreleased, item_name(l))]
        if unnamed:
            failures.append(
                f"{len(unnamed)} item(s) of {package} removed since {ref[:12]} are not named in "
                f"CHANGELOG.md's `## Unreleased` section (name each, with its replacement):"
                + "".join(f"\n  - {l} (name: {item_name(l)})" for l in unnamed[:40]))
        else:
            print(f"api/{package}.txt: {len(lines)} items, matches the code; "
                  f"{len(removed)} removed since {ref[:12]}, each in CHANGELOG.md")
    if failures:
        sys.exit("public-items: " + "\n".join(failures))


def main():
    args = sys.argv[1:]
    if "--write" in args or "--check" in args:
        check = "--check" in args
        rest = [a for a in args if a not in ("--write", "--check")]
        base = None
        if "--base" in rest:
            i = rest.index("--base")
            base = rest[i + 1] if i + 1 < len(rest) else None
            rest = rest[:i] + rest[i + 2:]
        packages = rest or ["sqs-claim", "sqs-claim-cli", "sqs-claim-testkit"]
        write_or_check(packages, check, base)
        return
    breakdown = "--breakdown" in args
    features, packages, rest = None, [], iter(a for a in args if a != "--breakdown")
    most = None
    for a in rest:
        if a == "--max":
            value = next(rest, "")
            if not value.isdigit():
                sys.exit("public-items: --max needs a number of items")
            most = int(value)
        elif a == "--default-features":
            features = ""
        elif a == "--features":
            features = next(rest, None)
            if not features:
                sys.exit("public-items: --features needs a comma-separated list")
        elif a.startswith("--features="):
            features = a.split("=", 1)[1]
        elif a.startswith("-"):
            sys.exit(f"public-items: unknown option {a}")
        else:
            packages.append(a)
    packages = packages or ["sqs-claim", "sqs-claim-cli", "sqs-claim-testkit"]
    which = {None: "", "": ", default features"}.get(features, f", features {features}")
    over = []
    for package in packages:
        owners = Counter() if breakdown else None
        kinds = reachable(doc_json(package, features), owners)
        total = sum(kinds.values())
        detail = ", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))
        print(f"{package}: {total} public items{which} ({detail})")
        if breakdown:
            for owner, n in owners.most_common():
                print(f"{n:5}  {owner}")
        if most is not None and total > most:
            over.append(f"{package}{which}: {total} public items, more than {most} "
                        f"(--breakdown shows where they are)")
    if over:
        sys.exit("public-items: " + "\n".join(over))


if __name__ == "__main__":
    main()
