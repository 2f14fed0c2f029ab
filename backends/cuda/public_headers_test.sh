#!/usr/bin/env bash
# Fails if a public header of backends/cuda (the files beside this script)
# includes a header of its internal/ or testing/ packages: a program that
# includes the backend's API must not see, nor depend on, that machinery.
set -euo pipefail
dir=backends/cuda
headers=("$dir"/*.h)
if [[ ${#headers[@]} -lt 6 ]]; then
  echo "expected the public headers of $dir, found: ${headers[*]}" >&2
  exit 1
fi
if grep -nE '#include +"ferry/backends/cuda/(.+/)?(internal|testing)/' "${headers[@]}"; then
  echo "public headers of $dir include internal/ or testing/ headers (above)" >&2
  exit 1
fi
echo "${#headers[@]} public headers checked"
