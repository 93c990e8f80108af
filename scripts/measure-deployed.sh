#!/usr/bin/env bash
# make measure-deployed: what a team deploys, measured beside what `cargo build` makes, in one run.
#
#   scripts/measure-deployed.sh [--n 1000] [--runs 3] [--init-runs 20] [--without-layout]
#
# Builds (release, the workspace's profile):
#   * `cargo build --release -p payments --features cli,rss-floor --bins` (CARGO_TARGET_DIR):
#     the `consumer` scripts/measure-rss.py and measure-init.py have always measured, the floor
#     (a bare lambda_runtime SQS function) and `payments` (it creates the tables);
#   * the `consumer` as template.yaml's `sam build` builds it: `cargo lambda build --release
#     --bin consumer` (x86_64) and `--arm64`, linked by cargo-lambda's zig, in
#     SQS_CLAIM_SAM_TARGET_DIR (default ~/.cache/sqs-claim/target-sam, the one make sam-build uses);
#   * with --without-layout, the x86_64 artifact once more with PAYMENTS_HOT_TEXT=0 (no hot-text
#     layout: what cargo-lambda made before issue 39).
# Then, on DynamoDB Local (scripts/standins.sh up), in the same runs: scripts/measure-rss.py
# (peak RSS of a warm batch of N and CPU, each against the floor) and scripts/measure-init.py
# (exec to the first `next`, against a bare lambda_runtime function: benches/bare_lambda.rs), and each
# binary's size and `.text`.
# The arm64 artifact cannot be measured here (under qemu-user the memory and time are the
# emulator's): its size and `.text` are printed, and make smoke-bootstrap runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/measure-lib.sh
n=1000 runs=3 init_runs=20 without=0
while [[ $# -gt 0 ]]; do
    case "$1" in
        --n) n=$2; shift 2 ;;
        --runs) runs=$2; shift 2 ;;
        --init-runs) init_runs=$2; shift 2 ;;
        --without-layout) without=1; shift ;;
        *) echo "usage: scripts/measure-deployed.sh [--n N] [--runs R] [--init-runs R] [--without-layout]" >&2; exit 2 ;;
    esac
done
cache="${SQS_CLAIM_CACHE:-$HOME/.cache/sqs-claim}"
target="${CARGO_TARGET_DIR:-$PWD/target}"
sam_target="${SQS_CLAIM_SAM_TARGET_DIR:-$cache/target-sam}"
cargo_lambda=$(scripts/pytool.sh cargo-lambda)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

timed() {  # timed LABEL COMMAND...: runs it, says how long it took
    local label=$1 start
    shift
    start=$(date +%s)
    "$@"
    echo "== built $label in $(($(date +%s) - start)) s" >&2
}
echo "== cargo build --release (CARGO_TARGET_DIR=$target)" >&2
timed "cargo build --release" cargo build --release -p payments --features cli,rss-floor --bins
lambda_build() {  # lambda_build NAME [cargo lambda build flags...]
    local name=$1
    shift
    echo "== cargo lambda build --release --bin consumer $* (CARGO_TARGET_DIR=$sam_target)" >&2
    timed "cargo lambda $name" env CARGO_TARGET_DIR="$sam_target" PATH="$(dirname "$cargo_lambda"):$PATH" \
        cargo lambda build --release --bin consumer "$@"
    cp "$sam_target/lambda/consumer/bootstrap" "$out/$name"
}
if [[ $without == 1 ]]; then
    PAYMENTS_HOT_TEXT=0 lambda_build x86_64-without-layout
fi
lambda_build x86_64
lambda_build arm64 --arm64

echo "== sizes (bytes; .text and the hot-text section from readelf)" >&2
for b in "$target/release/consumer" "$out"/*; do
    printf '  %-60s %10d  .text %9d  .text.hot %9d\n' "$b" "$(stat -c %s "$b")" \
        "$(section "$b" .text)" "$(section "$b" .text.hot)"
done

also=(--also "cargo-lambda x86_64=$out/x86_64")
[[ $without == 1 ]] && also+=(--also "cargo-lambda x86_64 without layout=$out/x86_64-without-layout")
side_by_side deployed "$n" "$runs" "$init_runs" "${also[@]}"
