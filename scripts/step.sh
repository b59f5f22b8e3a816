#!/usr/bin/env bash
# Runs a step of `make test` (the command after NAME) and prints how long it took, so a slow
# step shows in the log: `make test: NAME took N s`, with the exit status when it failed.
set -u
name=$1
shift
started=$SECONDS
"$@"
status=$?
if [ "$status" -eq 0 ]; then
  echo "make test: $name took $((SECONDS - started)) s"
else
  echo "make test: $name took $((SECONDS - started)) s (exit $status)"
fi
exit "$status"
