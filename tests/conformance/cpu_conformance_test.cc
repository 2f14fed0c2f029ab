// The CPU backend runs the backend conformance suite, with one worker
// thread and with several.
#include "ferry/backends/cpu/cpu_backend.h"
#include "ferry/tests/conformance/conformance.h"

namespace ferry::testing {
namespace {

FERRY_INSTANTIATE_CONFORMANCE(
    Cpu,
    ConformanceBackend{
        .name = "cpu_1thread",
        .create = [] { return GetCpuDevice().CreateBackend("threads=1"); }},
    ConformanceBackend{.name = "cpu_3threads", .create = [] {
                         return GetCpuDevice().CreateBackend("threads=3");
                       }});

}  // namespace
}  // namespace ferry::testing
