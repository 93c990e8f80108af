#!/usr/bin/env bash
# scripts/measure-profiles.sh (make measure-profiles): the release profile's link-time settings against each other, in one run.
#
#   scripts/measure-profiles.sh [--n 1000] [--runs 3] [--init-runs 20]
#                               [--builds-only | --measure-only] [VARIANT...]
#
# A VARIANT is LTO/CODEGEN_UNITS: fat/1 (the workspace's release profile), thin/1, thin/16, off/16
# (default: fat/1 thin/1 thin/16). For each, in a target dir of its own under
# ~/.cache/sqs-claim/profiles/ (removed first: every build is cold, as a first `sam build` is),
# one after the other:
#   * `cargo build --release -p payments --bin consumer`, the profile's `lto` and `codegen-units`
#     given with `--config` (everything else as the workspace's release profile): the cold
#     build, its wall and CPU seconds (user + system, /usr/bin/time: the CPU figure does not
#     depend on what else the machine runs, the wall does);
#   * a one-line change to the library (src/lib.rs touched) and the same build again: what
#     every change after the first costs (the relink);
#   * the binary's size and `.text` (written to the variant's build.txt).
# Then, on DynamoDB Local (scripts/standins.sh up), every variant's consumer in the same runs:
# scripts/measure-rss.py (peak RSS of a warm batch of N, CPU of the process, against the floor)
# and scripts/measure-init.py (exec to the first `next`, against a bare lambda_runtime
# function); the floor and the `payments` that creates the tables come from `cargo build
# --release -p payments --features cli,rss-floor --bins` (CARGO_TARGET_DIR).
# --builds-only stops after the builds; --measure-only measures the builds a --builds-only run
# left (so the builds can run while the stand-ins are busy elsewhere).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/measure-lib.sh
n=1000 runs=3 init_runs=20 variants=() phase=both
while [[ $# -gt 0 ]]; do
    case "$1" in
        --n) n=$2; shift 2 ;;
        --runs) runs=$2; shift 2 ;;
        --init-runs) init_runs=$2; shift 2 ;;
        --builds-only) phase=builds; shift ;;
        --measure-only) phase=measure; shift ;;
        */*) variants+=("$1"); shift ;;
        *) echo "usage: scripts/measure-profiles.sh [--n N] [--runs R] [--init-runs R] [--builds-only | --measure-only] [LTO/UNITS...]" >&2; exit 2 ;;
    esac
done
[[ ${#variants[@]} -gt 0 ]] || variants=(fat/1 thin/1 thin/16)
cache="${SQS_CLAIM_CACHE:-$HOME/.cache/sqs-claim}"
target="${CARGO_TARGET_DIR:-$PWD/target}"
[[ $phase == builds ]] || cargo build --release -p payments --features cli,rss-floor --bins

also=()
summary=()
# timed FILE COMMAND...: runs it, writes "wall user system" seconds to FILE.
timed() { local out=$1; shift; /usr/bin/time -f '%e %U %S' -o "$out" "$@"; }
for v in "${variants[@]}"; do
    lto=${v%/*} units=${v#*/}
    dir="$cache/profiles/$lto-$units"
    bin="$dir/release/consumer"
    also+=(--also "$v=$bin")
    if [[ $phase == measure ]]; then
        [[ -f "$dir/build.txt" ]] || { echo "no build of $v in $dir: run with --builds-only first" >&2; exit 1; }
        summary+=("$(cat "$dir/build.txt")")
        continue
    fi
    rm -rf "$dir"
    mkdir -p "$dir"
    cfg=(--config "profile.release.lto=\"$lto\"" --config "profile.release.codegen-units=$units")
    echo "== $v: cold build ($dir)" >&2
    timed "$dir/cold.time" env CARGO_TARGET_DIR="$dir" cargo build --release -p payments --bin consumer "${cfg[@]}"
    touch src/lib.rs
    timed "$dir/relink.time" env CARGO_TARGET_DIR="$dir" cargo build --release -p payments --bin consumer "${cfg[@]}"
    read -r cold cold_u cold_s <"$dir/cold.time"
    read -r relink relink_u relink_s <"$dir/relink.time"
    text=$(section "$bin" .text)
    stripped=$(mktemp)
    strip -o "$stripped" "$bin"
    printf '%-8s cold build %6.0f s (CPU %5.0f s), after a change %5.0f s (CPU %5.0f s), size %5s MB (stripped %4s MB), .text %4s MB\n' \
        "$v" "$cold" "$(python3 -c "print($cold_u + $cold_s)")" "$relink" "$(python3 -c "print($relink_u + $relink_s)")" \
        "$(mb "$(stat -c %s "$bin")")" "$(mb "$(stat -c %s "$stripped")")" "$(mb "$text")" >"$dir/build.txt"
    rm -f "$stripped"
    summary+=("$(cat "$dir/build.txt")")
done
echo "== builds (one after the other; wall and CPU seconds, user + system):"
printf '  %s\n' "${summary[@]}"
[[ $phase == builds ]] && exit 0

side_by_side profiles "$n" "$runs" "$init_runs" "${also[@]}"
