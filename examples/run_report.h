// The report of pipelined_inference's runs side by side (throughput,
// latency quantiles, engine busy shares, overlap) and the check that the
// runs agree.
#ifndef FERRY_EXAMPLES_RUN_REPORT_H_
#define FERRY_EXAMPLES_RUN_REPORT_H_

#include <cstdio>
#include <string>
#include <vector>

#include "ferry/examples/inference_run.h"

namespace ferry::examples {

// The value at quantile `q` in [0, 1] (nearest rank); 0 for none.
double Quantile(std::vector<double> v, double q);

// "512 B", "1.5 KiB", "2.0 MiB".
std::string FormatBytes(double bytes);

// Writes one column per run to `out`; `modelled`: the runs' clock is a
// simulated device's (adds the slowest-stage bound). `runs` is not empty.
void PrintReport(std::FILE* out, const std::vector<RunResult>& runs,
                 bool modelled);

// Compares every run with the last one: same tokens, same logits (NaN-aware:
// a NaN in one run and not the other is a difference), and warns of any
// NaN/Inf logits. Returns the lines to print; adds each failed check to
// `*problems`.
std::string CompareRuns(const std::vector<RunResult>& runs, int* problems);

}  // namespace ferry::examples

#endif  // FERRY_EXAMPLES_RUN_REPORT_H_
