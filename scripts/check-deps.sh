#!/usr/bin/env bash
# What a user's crate compiles when it depends on sqs-claim with the default features.
#
# Builds the dependency tree (`cargo tree -e normal`, no compilation) of a scratch crate in a
# temp dir that depends on this repo's root package by path, with default features, and fails
# if any package on the deny list appears: those belong to opt-in features (sqlite, redis,
# postgres) or to the example app (payments), never to the library's defaults.
#
# Usage: scripts/check-deps.sh
# Environment (optional): CARGO_TARGET_DIR is ignored here (nothing is built).
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
# query_map: what aws_lambda_events' "apigw" feature (our `apigw`) adds to the tree.
readonly DENY=(rusqlite libsqlite3-sys tracing-subscriber clap saphyr aws-sdk-lambda redis tokio-postgres deadpool-postgres query_map)

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT

mkdir -p "$scratch/src"
cat >"$scratch/Cargo.toml" <<EOF
[package]
name = "sqs-claim-user"
version = "0.0.0"
edition = "2024"
publish = false

[dependencies]
sqs-claim = { path = "$repo" }

# Not a member of any enclosing workspace.
[workspace]
EOF
echo 'fn main() {}' >"$scratch/src/main.rs"
# The repo's lock file, so the scratch crate resolves to the versions the repo is tested with
# (and needs no registry round trip when those are already downloaded).
cp "$repo/Cargo.lock" "$scratch/Cargo.lock"

echo "check-deps: scratch crate depending on sqs-claim (path $repo, default features)"
tree="$(cd "$scratch" && cargo tree -e normal --prefix none --format '{p}')"
packages="$(printf '%s\n' "$tree" | awk '{print $1}' | sort -u)"
echo "check-deps: $(printf '%s\n' "$packages" | wc -l) packages in the normal dependency tree"

found=()
for name in "${DENY[@]}"; do
    if printf '%s\n' "$packages" | grep -qx -- "$name"; then
        found+=("$name")
        echo "check-deps: FOUND $name"
        (cd "$scratch" && cargo tree -e normal -i "$name" --depth 3) | sed 's/^/    /'
    else
        echo "check-deps: absent $name"
    fi
done

if ((${#found[@]})); then
    echo "check-deps: FAIL: the default features pull in ${found[*]}" >&2
    exit 1
fi
echo "check-deps: OK: none of ${DENY[*]} in the default dependency tree"

# The example app is built on the library alone (issue 37): no dependency of any kind, optional
# or not, on the operator's crate.
app_deps="$(cd "$repo" && cargo metadata --format-version 1 --no-deps |
    python3 -c 'import json,sys
app = [p for p in json.load(sys.stdin)["packages"] if p["name"] == "payments"]
if not app:
    sys.exit("check-deps: no package named payments in the workspace")
print("\n".join(d["name"] for d in app[0]["dependencies"]))')"
if ! printf '%s\n' "$app_deps" | grep -qx sqs-claim; then
    echo "check-deps: FAIL: examples/payments does not depend on sqs-claim (the check would pass vacuously)" >&2
    exit 1
fi
if printf '%s\n' "$app_deps" | grep -qx sqs-claim-cli; then
    echo "check-deps: FAIL: examples/payments depends on sqs-claim-cli (the app must need the library alone)" >&2
    exit 1
fi
echo "check-deps: OK: examples/payments depends on sqs-claim, not on sqs-claim-cli"
