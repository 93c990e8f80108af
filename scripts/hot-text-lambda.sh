#!/usr/bin/env bash
# The twin of the x86_64 `consumer` that `cargo lambda build --release` (sam build, make
# deploy) makes, unstripped, for `scripts/hot-text.py --deployed`: cargo-lambda builds with
# `--target x86_64-unknown-linux-gnu` and `build.rustflags = ["-C", "target-cpu=haswell"]`,
# both of which change every symbol's hash, then strips the symbols (a profile setting). This
# build has the same target, flags and features and keeps its symbols, so that the names
# scripts/hot-text.py profiles in it would be the deployed artifact's.
#
# Measured (docs/performance.md, "What a team deploys"): they are not all: the artifact peaked
# at 15.1 MiB with them, not the 12.4 of a build whose exact names match; what else cargo-lambda
# (cargo-zigbuild) hashes in was not found. A check by symbol is not possible here: with LTO
# the rlibs hold bitcode, and the artifact has no symbols.
#
#   scripts/hot-text-lambda.sh      # prints the twin's path
#
# Its target dir: SQS_CLAIM_TWIN_TARGET_DIR, default ~/.cache/sqs-claim/target-lambda-twin.
set -euo pipefail
cd "$(dirname "$0")/.."
cache="${SQS_CLAIM_CACHE:-$HOME/.cache/sqs-claim}"
twin="${SQS_CLAIM_TWIN_TARGET_DIR:-$cache/target-lambda-twin}"
triple=x86_64-unknown-linux-gnu
CARGO_TARGET_DIR="$twin" cargo build --release -p payments --bin consumer --target "$triple" \
    --config 'build.rustflags = ["-C", "target-cpu=haswell"]' >&2
echo "$twin/$triple/release/consumer"
