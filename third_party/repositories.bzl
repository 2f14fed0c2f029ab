"""Repositories ferry needs, all resolved from this machine (no downloads).

`ferry_dependencies()` defines, unless the calling workspace already has them:
  - the offline shims Bazel 4.2.3 would otherwise download (`rules_cc`,
    `rules_java`, `remote_coverage_tools`, `platforms`);
  - system libraries under the names Bazel users know: `@com_google_absl`,
    `@com_google_googletest`, `@com_github_google_benchmark`, `@liburing`,
    `@openblas` (benchmark baseline only), `@nlohmann_json`, `@pcre2`,
    `@icu`, `@ucx` and `@local_cuda`.

A workspace that embeds ferry and has its own copy of one of these defines it
before calling `ferry_dependencies()`; ferry then uses that copy.

Link lines come from pkg-config at fetch time, so they match what is installed.
"""

load(":system_libs.bzl", "cuda_repository", "pkgconfig_repository")

# Upstream Abseil labels (package -> {target: pkg-config module}) that ferry
# and its embedders may use. Only modules present on the machine are emitted.
_ABSL_TARGETS = {
    "absl/algorithm": {"algorithm": "absl_algorithm", "container": "absl_algorithm_container"},
    "absl/base": {
        "base": "absl_base",
        "config": "absl_config",
        "core_headers": "absl_core_headers",
        "dynamic_annotations": "absl_dynamic_annotations",
        "log_severity": "absl_log_severity",
        "prefetch": "absl_prefetch",
    },
    "absl/cleanup": {"cleanup": "absl_cleanup"},
    "absl/container": {
        "btree": "absl_btree",
        "fixed_array": "absl_fixed_array",
        "flat_hash_map": "absl_flat_hash_map",
        "flat_hash_set": "absl_flat_hash_set",
        "inlined_vector": "absl_inlined_vector",
        "node_hash_map": "absl_node_hash_map",
        "node_hash_set": "absl_node_hash_set",
    },
    "absl/debugging": {
        "failure_signal_handler": "absl_failure_signal_handler",
        "stacktrace": "absl_stacktrace",
        "symbolize": "absl_symbolize",
    },
    "absl/flags": {
        "flag": "absl_flags",
        "parse": "absl_flags_parse",
        "usage": "absl_flags_usage",
    },
    "absl/functional": {
        "any_invocable": "absl_any_invocable",
        "bind_front": "absl_bind_front",
        "function_ref": "absl_function_ref",
    },
    "absl/hash": {"hash": "absl_hash"},
    "absl/memory": {"memory": "absl_memory"},
    "absl/meta": {"type_traits": "absl_type_traits"},
    "absl/numeric": {"bits": "absl_bits", "int128": "absl_int128"},
    "absl/random": {"random": "absl_random_random", "distributions": "absl_random_distributions"},
    "absl/status": {"status": "absl_status", "statusor": "absl_statusor"},
    "absl/strings": {
        "cord": "absl_cord",
        "str_format": "absl_str_format",
        "strings": "absl_strings",
    },
    "absl/synchronization": {"synchronization": "absl_synchronization"},
    "absl/time": {"time": "absl_time"},
    "absl/types": {
        "optional": "absl_optional",
        "span": "absl_span",
        "variant": "absl_variant",
    },
    "absl/utility": {"utility": "absl_utility"},
}

# Upstream googletest's `:gtest` includes gMock; keep that shape.
_GTEST_TARGETS = {
    "": {
        "gtest": "gmock gtest",
        "gtest_main": "gmock gtest_main",
        "gmock": "gmock gtest",
        "gmock_main": "gmock_main",
    },
}

_BENCHMARK_TARGETS = {
    "": {
        "benchmark": "benchmark",
        # Debian ships libbenchmark_main.a without a .pc file.
        "benchmark_main": "benchmark -lbenchmark_main",
    },
}

def _cc_forwarding_shim_impl(ctx):
    lines = ["# Forwards each rule to its native form (offline shim for Bazel 4)."]
    for name in ctx.attr.symbols:
        lines.append("{0} = native.{0}".format(name))
    ctx.file(ctx.attr.bzl_path, "\n".join(lines) + "\n")
    ctx.file(ctx.attr.bzl_path.rpartition("/")[0] + "/BUILD", "")
    ctx.file("BUILD", "")

_forwarding_shim = repository_rule(
    implementation = _cc_forwarding_shim_impl,
    attrs = {
        "bzl_path": attr.string(mandatory = True),
        "symbols": attr.string_list(mandatory = True),
    },
)

def _coverage_tools_shim_impl(ctx):
    ctx.file("BUILD", """
filegroup(name = "coverage_report_generator", visibility = ["//visibility:public"])
filegroup(name = "lcov_merger", visibility = ["//visibility:public"])
""")

_coverage_tools_shim = repository_rule(implementation = _coverage_tools_shim_impl)

def _flatten(targets):
    return {
        package + ":" + name: spec
        for package, names in targets.items()
        for name, spec in names.items()
    }

def _maybe(rule, name, **kwargs):
    if not native.existing_rule(name):
        rule(name = name, **kwargs)

def ferry_dependencies():
    """Defines every external repository ferry uses that is not defined yet."""
    _maybe(
        _forwarding_shim,
        name = "rules_cc",
        bzl_path = "cc/defs.bzl",
        symbols = [
            "cc_binary",
            "cc_import",
            "cc_library",
            "cc_proto_library",
            "cc_test",
            "cc_toolchain",
            "cc_toolchain_suite",
            "fdo_prefetch_hints",
            "fdo_profile",
            "objc_import",
            "objc_library",
        ],
    )
    _maybe(
        _forwarding_shim,
        name = "rules_java",
        bzl_path = "java/defs.bzl",
        symbols = [
            "java_binary",
            "java_import",
            "java_library",
            "java_lite_proto_library",
            "java_package_configuration",
            "java_plugin",
            "java_proto_library",
            "java_runtime",
            "java_test",
            "java_toolchain",
        ],
    )
    _maybe(_coverage_tools_shim, name = "remote_coverage_tools")
    _maybe(
        native.local_repository,
        name = "platforms",
        path = "/usr/share/bazel/tools/platforms",
    )
    _maybe(pkgconfig_repository, name = "com_google_absl", targets = _flatten(_ABSL_TARGETS))
    _maybe(pkgconfig_repository, name = "com_google_googletest", targets = _flatten(_GTEST_TARGETS))
    _maybe(pkgconfig_repository, name = "com_github_google_benchmark", targets = _flatten(_BENCHMARK_TARGETS))
    _maybe(pkgconfig_repository, name = "liburing", targets = {":liburing": "liburing"})
    _maybe(pkgconfig_repository, name = "openblas", targets = {":openblas": "openblas"})
    # Tokenizers: JSON (header-only) and Unicode regexes.
    _maybe(pkgconfig_repository, name = "nlohmann_json", targets = {":nlohmann_json": "nlohmann_json"})
    _maybe(pkgconfig_repository, name = "pcre2", targets = {":pcre2": "libpcre2-8"})
    _maybe(pkgconfig_repository, name = "icu", targets = {":icu": "icu-uc"})
    # Remote devices: UCX (Debian's libucx-dev).
    _maybe(pkgconfig_repository, name = "ucx", targets = {":ucx": "ucx"})
    _maybe(cuda_repository, name = "local_cuda")
