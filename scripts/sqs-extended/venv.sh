#!/usr/bin/env bash
# Creates (once) the venv the large-message tests drive Python's `amazon-sqs-extended-client`
# from, and prints its python (scripts/pytool.sh --lib: rebuilt when the pins change, never in
# the system Python).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
exec "$root/scripts/pytool.sh" --lib sqs-extended amazon-sqs-extended-client==1.0.1 boto3==1.44.8
