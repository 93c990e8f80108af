#!/usr/bin/env bash
# `make bench` / `make bench-quick`: the in-process overhead bench, then sqs-claim side by side
# with Powertools (Python, TypeScript) and a bare SDK loop on DynamoDB Local.
#
#   scripts/bench/run.sh [--quick] [extra compare.py flags, e.g. --impls sqs-claim,bare-sdk]
#
# Needs DynamoDB Local (SQS_CLAIM_DYNAMODB_ENDPOINT, default http://127.0.0.1:8000; `make bench`
# starts it), python3 with venv, node and npm. Installs Powertools into .bench/ on first use.
# Results: .bench/results.json and .bench/results.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
CARGO=${CARGO:-cargo}
OUT=${BENCH_DIR:-.bench}
quick=()
if [ "${1:-}" = "--quick" ]; then
    quick=(--ns 10,100)
    shift
fi

scripts/bench/setup.sh

echo "== building the Rust workers (release)" >&2
"$CARGO" bench -p sqs-claim --all-features --bench dynamodb --bench delay_proxy --no-run --message-format=json-render-diagnostics \
    >"$OUT/build.json"
exe() {
    python3 -c '
import json, sys
for line in open(sys.argv[1]):
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == sys.argv[2] and m.get("executable"):
        print(m["executable"])
' "$OUT/build.json" "$1" | tail -n 1
}
worker=$(exe dynamodb)
proxy=$(exe delay_proxy)
[ -n "$worker" ] && [ -n "$proxy" ] || { echo "bench: could not find the built workers" >&2; exit 1; }

echo "== in-process overhead (memory store): cargo bench -p sqs-claim --no-default-features --bench processor" >&2
"$CARGO" bench -p sqs-claim --no-default-features --bench processor | tee "$OUT/processor.txt"

"$OUT/venv/bin/python" scripts/bench/compare.py --rust-worker "$worker" --proxy "$proxy" \
    --out-dir "$OUT" --processor-bench "$OUT/processor.txt" "${quick[@]}" "$@"
