#!/usr/bin/env bash
# Installs what the side-by-side benchmark compares sqs-claim against, inside the work tree:
#   .bench/venv  Powertools for AWS Lambda (Python) + boto3, in a venv of its own
#   .bench/node  Powertools for AWS Lambda (TypeScript) + the AWS SDK v3 DynamoDB client
# Never into the system Python or a global node_modules. Versions are pinned so a figure can
# be traced to what produced it; BENCH_PT_PY / BENCH_PT_TS override them.
set -euo pipefail
cd "$(dirname "$0")/../.."
BENCH_DIR=${BENCH_DIR:-.bench}
PT_PY=${BENCH_PT_PY:-3.37.0}
PT_TS=${BENCH_PT_TS:-2.35.0}
SDK_JS=${BENCH_SDK_JS:-3.1169.0}

mkdir -p "$BENCH_DIR"
# Nothing under .bench/ belongs in git (the venv, node_modules, results).
[ -f "$BENCH_DIR/.gitignore" ] || echo '*' >"$BENCH_DIR/.gitignore"

py_stamp="$BENCH_DIR/venv/.installed-$PT_PY"
if [ ! -f "$py_stamp" ]; then
    echo "bench setup: Powertools Python $PT_PY into $BENCH_DIR/venv" >&2
    python3 -m venv "$BENCH_DIR/venv"
    "$BENCH_DIR/venv/bin/pip" install --quiet --disable-pip-version-check \
        "aws-lambda-powertools==$PT_PY" boto3
    touch "$py_stamp"
fi

ts_stamp="$BENCH_DIR/node/.installed-$PT_TS-$SDK_JS"
if [ ! -f "$ts_stamp" ]; then
    echo "bench setup: Powertools TypeScript $PT_TS into $BENCH_DIR/node" >&2
    mkdir -p "$BENCH_DIR/node"
    cat >"$BENCH_DIR/node/package.json" <<JSON
{
  "name": "sqs-claim-bench-powertools-ts",
  "private": true,
  "dependencies": {
    "@aws-lambda-powertools/batch": "$PT_TS",
    "@aws-lambda-powertools/idempotency": "$PT_TS",
    "@aws-sdk/client-dynamodb": "$SDK_JS",
    "@aws-sdk/lib-dynamodb": "$SDK_JS"
  }
}
JSON
    (cd "$BENCH_DIR/node" && npm install --silent --no-audit --no-fund)
    touch "$ts_stamp"
fi
