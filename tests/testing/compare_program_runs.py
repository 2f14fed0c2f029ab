"""Compares two runs of the main program on one prompts file.

  compare_program_runs.py WANT.jsonl WANT.npy GOT.jsonl GOT.npy REL_TOL \
      REQUESTS VALUES

Each run's results (JSON lines with "id" and "tokens", REQUESTS of them) and
logits (.npy of VALUES f32) must agree: the same tokens for every request,
every logit finite and within REL_TOL of the largest |logit| of WANT. Exits non-zero,
saying why, otherwise (NaN fails every comparison).
"""
import json
import math
import struct
import sys


def results(path):
    return {line["id"]: line["tokens"] for line in map(json.loads, open(path))}


def logits(path):
    data = open(path, "rb").read()
    assert data[:6] == b"\x93NUMPY", path
    n = struct.unpack("<H", data[8:10])[0]
    body = data[10 + n:]
    return struct.unpack("<%df" % (len(body) // 4), body)


def main(want_results, want_logits, got_results, got_logits, rel_tol,
         requests, values):
    want, got = results(want_results), results(got_results)
    assert len(want) == int(requests) and want == got, (want, got)
    a, b = logits(want_logits), logits(got_logits)
    assert len(a) == len(b) == int(values), (len(a), len(b))
    assert all(math.isfinite(x) for x in b), "non-finite logits"
    err = max(abs(x - y) for x, y in zip(a, b))
    scale = max(abs(x) for x in a)
    assert err <= float(rel_tol) * scale, (err, scale)
    print("%s: tokens equal, max |logit difference| %.3g of %.3g" %
          (got_results, err, scale))


if __name__ == "__main__":
    main(*sys.argv[1:])
