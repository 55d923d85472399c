#!/usr/bin/env bash
# Before make test's pool (scripts/test-pool.sh) runs suites side by side:
# what several of them share is made once, here, so none installs it while
# another uses it. The Python venv with the library (target/pyenv-clients,
# also the crossworker's) and clients/node's packages; each script says
# SKIPPED (or fails in CI) as it would in its suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash clients/python/run-tests.sh --prepare
sh clients/node/run-tests.sh --prepare
