"""ferry's layer order, written once, and the test that checks it.

LAYERS says, for each part of the tree, which parts it may depend on; what
those may reach, it may reach too. A package belongs to the longest entry
that is its path or a parent of it (backends/cuda/kernels is in
"backends/cuda"), except that "backends" holds only the interfaces package
itself: a new backends/<name> must get its own entry. A package that no
entry holds fails its test, so every new package is placed on purpose.

`ferry_layering_test()`, called at the end of every BUILD file that defines
a library, checks every cc_library of that package twice:
  - the build graph: no transitive dep may reach a layer that the order does
    not allow (analysis fails, naming the edge);
  - the include graph: no `#include "ferry/..."` line in the libraries'
    sources may name a header of such a layer (the test fails, naming the
    file, the header and the two layers).
Tests and benchmarks (cc_test, binaries) are not checked: they may reach
across layers to compare backends. `forbidden` adds package-specific rules
on top of the order: "sched" means sched and its subpackages, "backends/*"
any subpackage of backends but not backends itself.
"""

# Which parts each part may depend on (directly; the closure is computed).
# Reading it bottom-up gives the order:
#   runtime < graph < quant < backends < backends/host
#     < {cpu, sim, cuda, remote, testing} (siblings, independent) < linked
#   inside remote: {protocol, transport} < {client, worker} < remote itself
#   backends < alloc < sched; quant < models/gguf, models/safetensors
#     < tokenizer < models (llama, open_model: a model with its tokenizer)
#   sched, models < engine; engine, tokenizer, linked < examples
# alloc, sched, models and engine use the backend interfaces only, never a
# concrete backend: programs pick those (backends/linked, examples, tests).
LAYERS = {
    "runtime": [],
    "graph": ["runtime"],
    "quant": ["graph"],
    # The reference evaluator dequantizes and quantizes.
    "graph/testing": ["quant"],
    "backends": ["graph"],
    "backends/host": ["backends", "quant"],
    "backends/cpu": ["backends/host"],
    "backends/sim": ["backends/host"],
    # Its kernel tests compare with graph/testing's reference evaluator.
    "backends/cuda": ["backends/host", "graph/testing"],
    # Remote devices: protocol and transport below, client and worker on
    # them (independent), the programs and their test support on top.
    "backends/remote/protocol": ["backends/host"],
    "backends/remote/transport": ["backends/host"],
    "backends/remote/client": [
        "backends/remote/protocol",
        "backends/remote/transport",
    ],
    "backends/remote/worker": [
        "backends/remote/protocol",
        "backends/remote/transport",
    ],
    "backends/remote": ["backends/remote/client", "backends/remote/worker"],
    "backends/testing": ["backends/host"],
    "backends/linked": [
        "backends/cpu",
        "backends/cuda",
        "backends/remote",
        "backends/sim",
    ],
    "alloc": ["backends"],
    "sched": ["alloc"],
    # File formats: what tokenizers and models read.
    "models/gguf": ["alloc", "quant"],
    "models/safetensors": ["alloc", "quant"],
    "tokenizer": ["models/gguf"],
    "models": ["alloc", "models/gguf", "models/safetensors", "quant", "tokenizer"],
    "engine": ["models", "sched"],
    "examples": ["backends/linked", "engine", "tokenizer"],
    # Cross-package tests and benchmarks sit on top of everything.
    "benchmarks": ["*"],
    "tests": ["*"],
    # Build support (sanitizer defaults linked into tests and programs).
    "bazel": [],
}

# Edges the order does not allow but the tree has, each with its reason.
# Keep this short: an entry here is a debt.
EXCEPTIONS = {
    # The (testonly) command fuzzer decodes tensor refs against the CPU's
    # packed buffer type.
    "backends/remote/protocol": ["backends/cpu"],
}

# Entries that hold only their own package, not its subpackages.
_EXACT = ["backends"]

def layer_of(package):
    """Returns the LAYERS entry that holds `package`, or None."""
    best = None
    for entry in LAYERS:
        if package == entry or (entry not in _EXACT and package.startswith(entry + "/")):
            if best == None or len(entry) > len(best):
                best = entry
    return best

def allowed_layers(entry):
    """Returns the entries `entry` may depend on, itself included."""
    allowed = {entry: True}
    for _ in range(len(LAYERS)):
        for e in list(allowed):
            for d in LAYERS.get(e, []) + EXCEPTIONS.get(e, []):
                if d == "*":
                    for every in LAYERS:
                        allowed[every] = True
                else:
                    allowed[d] = True
    return sorted(allowed)

_DepsInfo = provider(fields = {"labels": "depset of Labels reachable"})

def _collect_impl(target, ctx):
    transitive = []
    for dep in getattr(ctx.rule.attr, "deps", []):
        if _DepsInfo in dep:
            transitive.append(dep[_DepsInfo].labels)
    return [_DepsInfo(labels = depset([target.label], transitive = transitive))]

_collect = aspect(implementation = _collect_impl, attr_aspects = ["deps"])

def _violates(label, rule):
    if rule.endswith("/*"):
        return label.package.startswith(rule[:-1])
    return label.package == rule or label.package.startswith(rule + "/")

# The include check: awk over the libraries' sources. Prints each forbidden
# include and exits 1 if there is one.
_INCLUDE_CHECK = """#!/bin/sh
# Generated by ferry_layering_test (bazel/layering.bzl).
exec awk -v package='{package}' -v layer='{layer}' -v allowed=' {allowed} ' \\
    -v entries=' {entries} ' -v exact=' {exact} ' '
function layer_of(dir,    n, i, best, e, list) {{
  best = ""
  n = split(entries, list, " ")
  for (i = 1; i <= n; i++) {{
    e = list[i]
    if (dir == e || (index(exact, " " e " ") == 0 && index(dir, e "/") == 1)) {{
      if (length(e) > length(best)) best = e
    }}
  }}
  return best
}}
/^[ \\t]*#[ \\t]*include[ \\t]*"ferry\\// {{
  header = $0
  sub(/^[^"]*"ferry\\//, "", header)
  sub(/".*$/, "", header)
  dir = header
  sub(/\\/[^\\/]*$/, "", dir)
  to = layer_of(dir)
  if (to == "") {{
    printf "%s:%d: includes ferry/%s, whose package %s has no layer in bazel/layering.bzl\\n", FILENAME, FNR, header, dir
    bad = 1
  }} else if (index(allowed, " " to " ") == 0) {{
    printf "layering violation: %s:%d includes ferry/%s, but %s (layer %s) must not depend on layer %s (bazel/layering.bzl)\\n", FILENAME, FNR, header, package, layer, to
    bad = 1
  }}
}}
END {{ exit bad }}
' {files} /dev/null
"""

def _layering_test_impl(ctx):
    workspace = ctx.label.workspace_name
    package = ctx.label.package
    layer = layer_of(package)
    if layer == None:
        fail("package {} has no layer: add it to LAYERS in bazel/layering.bzl".format(package))
    allowed = allowed_layers(layer)
    for dep in ctx.attr.deps:
        for label in dep[_DepsInfo].labels.to_list():
            if label.workspace_name != workspace:
                continue
            to = layer_of(label.package)
            if to == None:
                fail("{} depends on {}, whose package has no layer: add it to LAYERS in bazel/layering.bzl".format(dep.label, label))
            for rule in ctx.attr.forbidden:
                if _violates(label, rule):
                    fail("layering violation: {} depends on {}, but {} must not depend on '{}' (its BUILD file)".format(
                        dep.label,
                        label,
                        package,
                        rule,
                    ))
            if to not in allowed:
                fail("layering violation: {} depends on {}, but {} (layer {}) must not depend on layer {} (bazel/layering.bzl)".format(
                    dep.label,
                    label,
                    package,
                    layer,
                    to,
                ))
    files = [f for f in ctx.files.srcs if f.extension in ["h", "cc"]]
    script = ctx.actions.declare_file(ctx.label.name + ".sh")
    ctx.actions.write(
        script,
        _INCLUDE_CHECK.format(
            package = package,
            layer = layer,
            allowed = " ".join(allowed),
            entries = " ".join(sorted(LAYERS)),
            exact = " ".join(_EXACT),
            files = " ".join(["'{}'".format(f.short_path) for f in files]),
        ),
        is_executable = True,
    )
    runfiles = ctx.runfiles(files = files)
    return [DefaultInfo(executable = script, runfiles = runfiles)]

_layering_test = rule(
    implementation = _layering_test_impl,
    attrs = {
        "deps": attr.label_list(aspects = [_collect]),
        "srcs": attr.label_list(allow_files = True),
        "forbidden": attr.string_list(),
    },
    test = True,
)

def ferry_layering_test(forbidden = [], name = "layering_test"):
    """Checks every cc_library defined so far in this package (see above)."""
    libraries = []
    sources = []
    for r in native.existing_rules().values():
        if r["kind"] != "cc_library":
            continue
        libraries.append(":" + r["name"])
        for attr in ["srcs", "hdrs", "textual_hdrs"]:
            for f in r.get(attr) or []:
                if f not in sources:
                    sources.append(f)
    _layering_test(
        name = name,
        deps = libraries,
        srcs = sources,
        forbidden = forbidden,
        size = "small",
    )
