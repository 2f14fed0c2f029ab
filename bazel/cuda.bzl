"""Compiles CUDA sources with the toolkit found by @local_cuda.

`cuda_library` turns `.cu` files into objects with nvcc and wraps them in a
cc_library, so C++ targets depend on it like on any other library. Without a
toolkit the target is incompatible and `bazel build //...` skips it.
"""

load("@local_cuda//:defs.bzl", "CUDA_FOUND")

# sm_80 (A100) and sm_90 (H100), plus PTX for the newest so later GPUs JIT it.
DEFAULT_CUDA_ARCHS = ["sm_80", "sm_90"]

def _gencode_flags(archs):
    flags = []
    for arch in archs:
        number = arch.replace("sm_", "")
        flags += ["-gencode", "arch=compute_{0},code=sm_{0}".format(number)]
    last = archs[-1].replace("sm_", "")
    flags += ["-gencode", "arch=compute_{0},code=compute_{0}".format(last)]
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
)

def cuda_compatible():
    """`target_compatible_with` value for targets that need the toolkit."""
    return [] if CUDA_FOUND else ["@platforms//:incompatible"]

def cuda_library(name, srcs, hdrs = [], deps = [], archs = DEFAULT_CUDA_ARCHS, copts = [], **kwargs):
    """A cc_library built from `.cu` sources with nvcc; links cudart statically.

    Its headers are published as "ferry/<package>/<file>", like every ferry
    library, and the `.cu` files see them (and their deps) the same way.
    """
    native.cc_library(
        name = name + "_cuda_hdrs",
        hdrs = hdrs,
        include_prefix = "ferry/" + native.package_name(),
        deps = deps + ["@local_cuda//:cuda_headers"],
        target_compatible_with = cuda_compatible(),
        visibility = ["//visibility:private"],
    )
    _cuda_objects(
        name = name + "_cuda_objects",
        srcs = srcs,
        deps = [":" + name + "_cuda_hdrs"],
        archs = archs,
        copts = copts,
        target_compatible_with = cuda_compatible(),
        visibility = ["//visibility:private"],
    )
    native.cc_library(
        name = name,
        srcs = [":" + name + "_cuda_objects"],
        deps = [":" + name + "_cuda_hdrs", "@local_cuda//:cudart_static"],
        # cudart is a static archive: keep CUDA objects out of fastbuild's
        # shared libraries so the final link resolves them against it.
        linkstatic = True,
        target_compatible_with = cuda_compatible(),
        **kwargs
    )
