"""Checks ferry's layering rule in the build, not only in prose.

`ferry_layering_test(forbidden = [...])`, called at the end of a package's
BUILD file, covers every cc_library of that package: their transitive deps
must not reach a forbidden package, or the analysis of the test fails with a
message naming the offending edge. Entries are package paths ("sched" means
sched and its subpackages); "backends/*" means any subpackage of backends
(the concrete backends) but not backends itself (the interfaces).
"""

_DepsInfo = provider(fields = {"labels": "depset of Labels reachable"})

def _collect_impl(target, ctx):
    transitive = []
    for dep in getattr(ctx.rule.attr, "deps", []):
        if _DepsInfo in dep:
            transitive.append(dep[_DepsInfo].labels)
    return [_DepsInfo(labels = depset([target.label], transitive = transitive))]

_collect = aspect(implementation = _collect_impl, attr_aspects = ["deps"])

def _violates(label, rule, workspace):
    if label.workspace_name != workspace:
        return False
    if rule.endswith("/*"):
        return label.package.startswith(rule[:-1])
    return label.package == rule or label.package.startswith(rule + "/")

def _layering_test_impl(ctx):
    workspace = ctx.label.workspace_name
    for dep in ctx.attr.deps:
        for label in dep[_DepsInfo].labels.to_list():
            for rule in ctx.attr.forbidden:
                if _violates(label, rule, workspace):
                    fail("layering violation: {} depends on {}, but {} must not depend on '{}' (see README.md, Layout)".format(
                        dep.label,
                        label,
                        ctx.label.package,
                        rule,
                    ))
    script = ctx.actions.declare_file(ctx.label.name + ".sh")
    ctx.actions.write(script, "#!/bin/sh\nexit 0\n", is_executable = True)
    return [DefaultInfo(executable = script)]

_layering_test = rule(
    implementation = _layering_test_impl,
    attrs = {
        "deps": attr.label_list(aspects = [_collect]),
        "forbidden": attr.string_list(mandatory = True),
    },
    test = True,
)

def ferry_layering_test(forbidden, name = "layering_test"):
    """Checks every cc_library defined so far in this package."""
    libraries = [
        ":" + r["name"]
        for r in native.existing_rules().values()
        if r["kind"] == "cc_library"
    ]
    _layering_test(name = name, deps = libraries, forbidden = forbidden, size = "small")
