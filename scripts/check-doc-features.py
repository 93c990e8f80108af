#!/usr/bin/env python3
"""Compiles each documentation page's Rust blocks under the features the page names, alone.

Usage: scripts/check-doc-features.py [--list] [PAGE ...]   (PAGE: docs/stores.md, README.md)

`cargo test --doc` under `--all-features` compiles every block whatever it needs, so a block
that calls an item of a feature its page does not name (`configure_all`, feature `sqs`, on a
page that says `settings`) passes there and fails for the reader who turned on what the page
says. Each page's features are the `cfg` of its `*Doctests` struct in src/lib.rs:

    #[cfg(all(doctest, feature = "redis", feature = "settings"))]
    #[doc = include_str!("../docs/stores.md")]
    pub struct StoresDoctests;

For each page this script checks that the page's text names each of those features (as
`` `NAME` ``, in a `--features` list, or as a default feature), then runs `cargo test -p sqs-claim --doc --no-default-features --features
THOSE -- NameDoctests`: the page's blocks built with those features and no others. `--list`
prints the pages and their features without building. Exit status 1 on the first failure.
"""
import os
import re
import subprocess
import sys

ROOT = os.environ.get("REPO") or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# `#[cfg(...)]` (possibly over several lines), then `#[doc = include_str!("../PATH")]`, then
# `pub struct NAME;`.
PAGE = re.compile(
    r'#\[cfg\((?P<cfg>[^\]]*)\)\]\s*#\[doc = include_str!\("\.\./(?P<path>[^"]+)"\)\]\s*'
    r'pub struct (?P<name>\w+);',
    re.S,
)


def pages():
    """(struct name, page path, features) for each doc page of src/lib.rs."""
    with open(os.path.join(ROOT, "src", "lib.rs")) as f:
        text = f.read()
    found = []
    for m in PAGE.finditer(text):
        cfg = m.group("cfg")
        if "doctest" not in cfg:
            continue
        features = re.findall(r'feature\s*=\s*"([^"]+)"', cfg)
        found.append((m.group("name"), m.group("path"), features))
    return found


def default_features():
    """The library's default features (`default = [...]` in Cargo.toml): a page needs not
    name them, a reader has them unless they turned them off."""
    with open(os.path.join(ROOT, "Cargo.toml")) as f:
        m = re.search(r'^default\s*=\s*\[([^\]]*)\]', f.read(), re.M)
    return set(re.findall(r'"([^"]+)"', m.group(1))) if m else set()


def named(page, feature):
    """Whether `page` names `feature`: as `` `feature` ``, in a `--features a,b` list, or as
    a default feature."""
    if f"`{feature}`" in page or feature in default_features():
        return True
    return any(
        feature in re.split(r"[,\s]+", listed)
        for listed in re.findall(r"--features[ =]([\w,/-]+)", page)
    )


def main():
    args = sys.argv[1:]
    listing = "--list" in args
    wanted = {a for a in args if not a.startswith("-")}
    found = pages()
    if not found:
        sys.exit("check-doc-features: no *Doctests structs found in src/lib.rs")
    unknown = wanted - {path for _, path, _ in found}
    if unknown:
        sys.exit(f"check-doc-features: no *Doctests struct includes {', '.join(sorted(unknown))}")
    for name, path, features in found:
        if wanted and path not in wanted:
            continue
        shown = ",".join(features) or "(none)"
        print(f"== {path}: {name}, features {shown}", flush=True)
        if listing:
            continue
        with open(os.path.join(ROOT, path)) as f:
            page = f.read()
        unnamed = [feat for feat in features if not named(page, feat)]
        if unnamed:
            sys.exit(
                f"check-doc-features: {path} is compiled with features it does not name: "
                f"{', '.join(unnamed)} (name each as `feature` in the text, or drop it from "
                f"{name}'s cfg in src/lib.rs)"
            )
        command = ["cargo", "test", "-q", "-p", "sqs-claim", "--doc", "--no-default-features"]
        if features:
            command += ["--features", ",".join(features)]
        command += ["--", name]
        result = subprocess.run(command, cwd=ROOT)
        if result.returncode != 0:
            sys.exit(
                f"check-doc-features: {path}'s Rust blocks do not compile (or pass) with the "
                f"features it names alone ({shown}): {' '.join(command)}"
            )


if __name__ == "__main__":
    main()
