#!/usr/bin/env bash
# The GPU checks as one prepared script, for a lent GPU machine (see README):
# builds the venv if needed, then runs only the tests marked gpu.
set -euo pipefail
cd "$(dirname "$0")/.."
make setup >/dev/null
PATH="$PWD/.venv/bin:$PATH" .venv/bin/python -m pytest -m gpu -v -rs tests/test_gpu.py tests/test_class_grading.py
# A class on the GPUs, by hand: each student's job gets 3 GPUs of its own, packed.
#   cd COURSE && python -m autograder autograde linear_regression --backend nccl --jobs 8
