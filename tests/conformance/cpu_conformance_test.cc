// The CPU backend runs the backend conformance suite.
#include "ferry/backends/cpu/cpu_backend.h"
#include "ferry/tests/conformance/backend_conformance.h"

namespace ferry::testing {
namespace {

INSTANTIATE_TEST_SUITE_P(
    Cpu, BackendConformanceTest,
    ::testing::Values(
        BackendFactory{
            "cpu_1thread",
            [] { return GetCpuDevice().CreateBackend("threads=1"); }},
        BackendFactory{
            "cpu_3threads",
            [] { return GetCpuDevice().CreateBackend("threads=3"); }}),
    FactoryName);

}  // namespace
}  // namespace ferry::testing
