#!/usr/bin/env bash
# Creates (once) the venv the Powertools interop tests drive Powertools for AWS Lambda (Python)
# from, and prints its python. Quick when the venv is already there with the pinned versions.
#
# Usage: scripts/powertools/venv.sh            prints the venv's python on stdout
#
# The venv lives in .powertools/venv at the repository root (gitignored). Everything goes into
# the venv, never into the system Python. Environment: SQS_CLAIM_PYTHON (default python3),
# SQS_CLAIM_POWERTOOLS_VENV (default <repo>/.powertools/venv).
set -euo pipefail

# The versions the interop is tested with. Changing them rebuilds the venv on the next run.
POWERTOOLS_VERSION=3.37.0
BOTO3_VERSION=1.44.8
pins=("aws-lambda-powertools==$POWERTOOLS_VERSION" "boto3==$BOTO3_VERSION")

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="${SQS_CLAIM_POWERTOOLS_VENV:-$root/.powertools/venv}"
python="${SQS_CLAIM_PYTHON:-python3}"
stamp="$venv/.sqs-claim-pins"

if [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "${pins[*]}" ]]; then
    echo "$venv/bin/python"
    exit 0
fi

echo "powertools venv: installing ${pins[*]} into $venv" >&2
rm -rf "$venv"
mkdir -p "$(dirname "$venv")"
"$python" -m venv "$venv" >&2 || {
    echo "powertools venv: '$python -m venv' failed (Debian: apt-get install python3-venv)" >&2
    exit 1
}
"$venv/bin/python" -m pip install -q --disable-pip-version-check "${pins[@]}" >&2 || {
    rm -rf "$venv"
    echo "powertools venv: pip install ${pins[*]} failed" >&2
    exit 1
}
"$venv/bin/python" -c 'import aws_lambda_powertools.utilities.idempotency, boto3' >&2 || {
    rm -rf "$venv"
    echo "powertools venv: the installed packages do not import" >&2
    exit 1
}
echo "${pins[*]}" >"$stamp"
echo "$venv/bin/python"
