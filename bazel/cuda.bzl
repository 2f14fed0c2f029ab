"""Compiles CUDA sources with the toolkit found by @local_cuda.

`cuda_library` turns `.cu` files into objects with nvcc and wraps them in a
cc_library, so C++ targets depend on it like on any other library. Without a
toolkit the target is incompatible and `bazel build //...` skips it.

No CUDA library links a CUDA runtime by itself: a program picks one. Real
programs get cudart and cuBLAS through `//backends/cuda:cuda_runtime` (the
public `//backends/cuda:cuda_backend` carries it); host tests link the test
double `//backends/cuda/testing:fake_cuda_runtime` in its place, so the same
objects run on a machine without a GPU. `ferry_cuda_test` makes both.
"""

load("@local_cuda//:defs.bzl", "CUDA_FOUND")
load("//bazel:ferry.bzl", "ferry_cc_test")

# sm_80 (A100) and sm_90 (H100), plus PTX for the newest so later GPUs JIT it.
DEFAULT_CUDA_ARCHS = ["sm_80", "sm_90"]

# The real CUDA runtime and cuBLAS, and their test double.
CUDA_RUNTIME = "//backends/cuda:cuda_runtime"
FAKE_CUDA_RUNTIME = "//backends/cuda/testing:fake_cuda_runtime"

def _gencode_flags(archs):
    flags = []
    for arch in archs:
        number = arch.replace("sm_", "")
        flags += ["-gencode", "arch=compute_{0},code=sm_{0}".format(number)]
    last = archs[-1].replace("sm_", "")
    flags += ["-gencode", "arch=compute_{0},code=compute_{0}".format(last)]
    return flags

# --copt flags that must reach nvcc's host compiler too: sanitizers
# instrument the host side of .cu files (kernel launchers, and the kernels'
# host emulation that the fake runtime runs) like the rest of the program.
_HOST_FLAG_PREFIXES = ["-fsanitize", "-fno-sanitize", "-fno-omit-frame-pointer"]

def _host_compiler_flags(ctx):
    flags = []
    for copt in ctx.fragments.cpp.copts:
        for prefix in _HOST_FLAG_PREFIXES:
            if copt.startswith(prefix):
                flags += ["-Xcompiler", copt]
                break
    return flags

def _cuda_objects_impl(ctx):
    cc_infos = [dep[CcInfo] for dep in ctx.attr.deps if CcInfo in dep]
    compilation = cc_common.merge_cc_infos(cc_infos = cc_infos).compilation_context
    include_flags = []
    for path in compilation.includes.to_list() + compilation.system_includes.to_list():
        include_flags += ["-I", path]
    for path in compilation.quote_includes.to_list():
        include_flags += ["-I", path]
    define_flags = ["-D" + d for d in compilation.defines.to_list()]
    objects = []
    for src in ctx.files.srcs:
        obj = ctx.actions.declare_file("_cuda_objs/{}/{}.o".format(ctx.label.name, src.basename))
        args = ctx.actions.args()
        args.add_all(["-c", "-std=c++20", "-O3", "-Xcompiler", "-fPIC", "-Xcompiler", "-Wall"])
        args.add_all(_gencode_flags(ctx.attr.archs))
        args.add_all(_host_compiler_flags(ctx))
        args.add_all(include_flags + define_flags + ctx.attr.copts)
        args.add_all(["-o", obj.path, src.path])
        ctx.actions.run(
            executable = ctx.executable._nvcc,
            arguments = [args],
            inputs = depset([src], transitive = [compilation.headers]),
            outputs = [obj],
            mnemonic = "Nvcc",
            progress_message = "Compiling CUDA {}".format(src.short_path),
            use_default_shell_env = True,
        )
        objects.append(obj)
    return [DefaultInfo(files = depset(objects))]

_cuda_objects = rule(
    implementation = _cuda_objects_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = [".cu"]),
        "deps": attr.label_list(providers = [CcInfo]),
        "archs": attr.string_list(default = DEFAULT_CUDA_ARCHS),
        "copts": attr.string_list(),
        "_nvcc": attr.label(
            default = "@local_cuda//:nvcc",
            allow_single_file = True,
            executable = True,
            cfg = "exec",
        ),
    },
    fragments = ["cpp"],
)

def cuda_compatible():
    """`target_compatible_with` value for targets that need the toolkit."""
    return [] if CUDA_FOUND else ["@platforms//:incompatible"]

def cuda_library(name, srcs, hdrs = [], deps = [], archs = DEFAULT_CUDA_ARCHS, copts = [], **kwargs):
    """A cc_library built from `.cu` sources with nvcc.

    Its headers are published as "ferry/<package>/<file>", like every ferry
    library, and the `.cu` files see them (and their deps) the same way. It
    links no CUDA runtime: the program that uses it picks one (see the top
    of this file).
    """
    native.cc_library(
        name = name + "_cuda_hdrs",
        hdrs = hdrs,
        include_prefix = "ferry/" + native.package_name(),
        deps = deps + ["@local_cuda//:cuda_headers"],
        target_compatible_with = cuda_compatible(),
        testonly = kwargs.get("testonly", False),
        visibility = ["//visibility:private"],
    )
    _cuda_objects(
        name = name + "_cuda_objects",
        srcs = srcs,
        deps = [":" + name + "_cuda_hdrs"],
        archs = archs,
        copts = copts,
        target_compatible_with = cuda_compatible(),
        testonly = kwargs.get("testonly", False),
        visibility = ["//visibility:private"],
    )
    native.cc_library(
        name = name,
        srcs = [":" + name + "_cuda_objects"],
        deps = [":" + name + "_cuda_hdrs"],
        # The runtime is a static archive (or its fake): keep CUDA objects
        # out of fastbuild's shared libraries so the final link resolves
        # them against whichever runtime the program links.
        linkstatic = True,
        target_compatible_with = cuda_compatible(),
        **kwargs
    )

def ferry_cuda_test(name, deps = [], tags = [], fake_tags = [], fake_deps = [], fake_env = {}, requires_gpu = True, **kwargs):
    """A CUDA test built twice from the same sources and libraries.

    `name` links the real CUDA runtime, is tagged exclusive (Bazel runs no
    other test beside it) and requires-gpu (it runs where a GPU is:
    ./bazelw adds --config=gpu) unless `requires_gpu` is False (a test of
    what happens without one); `name + "_on_fake"` links
    the fake runtime (//backends/cuda/testing) and runs everywhere, under
    the sanitizers too. `deps` must link no runtime of their own (use the
    `_lib` targets of //backends/cuda). `fake_deps`/`fake_env` go to the
    fake variant only (e.g. the fake's control API, its configuration).
    """
    ferry_cc_test(
        name = name,
        deps = deps + [CUDA_RUNTIME],
        # Exclusive: on a GPU machine Bazel runs it alone, never beside
        # another binary on the same GPU (timings, memory, sticky errors).
        tags = tags + ["exclusive"] + (["requires-gpu"] if requires_gpu else []),
        target_compatible_with = cuda_compatible(),
        **kwargs
    )
    ferry_cc_test(
        name = name + "_on_fake",
        deps = deps + fake_deps + [FAKE_CUDA_RUNTIME],
        tags = tags + fake_tags + ["cuda-fake"],
        env = fake_env,
        target_compatible_with = cuda_compatible(),
        **kwargs
    )
