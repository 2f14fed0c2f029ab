"""Macros every ferry package uses for its C++ targets.

They give ferry's own code its warnings (`-Wall -Wextra -Werror`, never applied
to system headers) and publish headers under the `ferry/` prefix, so that
`#include "ferry/runtime/task.h"` works the same inside ferry and inside a
workspace that embeds it, even one with its own `runtime/` package.
"""

# Sanitizer suppressions for uninstrumented system libraries (bazel/BUILD).
_SANITIZER_DEFAULTS = str(Label("//bazel:sanitizer_defaults"))

FERRY_COPTS = [
    "-Wall",
    "-Wextra",
    "-Werror",
    "-Wno-missing-field-initializers",
]

_NO_AVX512_EMULATION = str(Label("//bazel:avx512_emulation_off"))

def with_avx512_emulation(deps):
    """The tests' SIMDe builds of the AVX-512 kernels, and the define their
    tests look for (FERRY_TEST_AVX512_EMULATION).

    Returns (deps, local_defines). Both are empty under
    --define=ferry_avx512_emulation=off, which .bazelrc's tsan config sets:
    those kernels are single-threaded, and their SIMDe build takes minutes
    under TSan. Plain and ASan builds keep them.
    """
    return (
        select({_NO_AVX512_EMULATION: [], "//conditions:default": deps}),
        select({
            _NO_AVX512_EMULATION: [],
            "//conditions:default": ["FERRY_TEST_AVX512_EMULATION"],
        }),
    )

def ferry_cc_library(name, copts = [], **kwargs):
    """A cc_library whose headers are included as "ferry/<package>/<file>"."""
    native.cc_library(
        name = name,
        copts = FERRY_COPTS + copts,
        include_prefix = "ferry/" + native.package_name(),
        **kwargs
    )

def ferry_cc_test(name, deps = [], copts = [], **kwargs):
    """A GoogleTest test; main() comes from gtest_main."""
    native.cc_test(
        name = name,
        copts = FERRY_COPTS + copts,
        deps = deps + ["@com_google_googletest//:gtest_main", _SANITIZER_DEFAULTS],
        **kwargs
    )

def ferry_cc_binary(name, copts = [], deps = [], **kwargs):
    native.cc_binary(
        name = name,
        copts = FERRY_COPTS + copts,
        deps = deps + [_SANITIZER_DEFAULTS],
        **kwargs
    )

def ferry_cc_benchmark(name, deps = [], copts = [], tags = [], **kwargs):
    """A Google Benchmark program. Build and run it with --config=opt."""
    native.cc_binary(
        name = name,
        copts = FERRY_COPTS + copts,
        deps = deps + ["@com_github_google_benchmark//:benchmark_main"],
        tags = tags + ["benchmark"],
        **kwargs
    )
