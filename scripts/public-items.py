#!/usr/bin/env python3
"""Counts the public items of a crate from rustdoc's JSON output.

Usage: scripts/public-items.py [--breakdown] [--features F1,F2 | --default-features] [PACKAGE ...]
       (default: sqs-claim sqs-claim-cli sqs-claim-testkit, all features)

Builds `cargo rustdoc -p PACKAGE --lib --all-features -- --output-format json` (rustdoc's JSON
is unstable: RUSTC_BOOTSTRAP=1 lets the stable toolchain emit it) and counts the items a user
can name: every item of the crate reachable from its root through public modules and
re-exports (modules, types, traits, functions, methods, constants, fields, variants), each
once. `--breakdown` also lists the count per owner (the type, trait or module holding each
item), largest first. `--features F1,F2` counts the face with those features alone (no default
features), `--default-features` with the crate's defaults: what a user with that build sees.
"""
import json
import os
import subprocess
import sys
from collections import Counter

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


def main():
    args = sys.argv[1:]
    breakdown = "--breakdown" in args
    features, packages, rest = None, [], iter(a for a in args if a != "--breakdown")
    for a in rest:
        if a == "--default-features":
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
    for package in packages:
        owners = Counter() if breakdown else None
        kinds = reachable(doc_json(package, features), owners)
        total = sum(kinds.values())
        detail = ", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))
        print(f"{package}: {total} public items{which} ({detail})")
        if breakdown:
            for owner, n in owners.most_common():
                print(f"{n:5}  {owner}")


if __name__ == "__main__":
    main()
