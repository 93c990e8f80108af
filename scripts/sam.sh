#!/usr/bin/env bash
# Runs the AWS SAM CLI with cargo-lambda (and the zig it builds with) found, whatever your PATH
# holds: both come from PyPI into venvs of their own under ~/.cache/sqs-claim (scripts/pytool.sh;
# the first run installs them). Run it from the directory of the template, like `sam`.
#
# Usage: scripts/sam.sh build            # cargo lambda build --release --arm64 --bin consumer
#        scripts/sam.sh deploy --guided   # any other sam command and flags, passed as they are
#        scripts/sam.sh validate --lint
#
# SAM_CLI_TELEMETRY defaults to 0 (no usage data sent); set it to 1 to send it.
set -euo pipefail
here=$(dirname "$0")
sam=$("$here/pytool.sh" sam aws-sam-cli)
cargo_lambda=$("$here/pytool.sh" cargo-lambda)
# sam runs `cargo lambda build`: cargo finds cargo-lambda on PATH, and cargo-lambda finds the
# `zig` pytool.sh puts beside it (whichever `python3` comes first on PATH).
PATH="$(dirname "$cargo_lambda"):$PATH"
export PATH SAM_CLI_TELEMETRY="${SAM_CLI_TELEMETRY:-0}"
exec "$sam" "$@"
