// The machine's stream (read) bandwidth, for the speed benchmark's "fraction of the bandwidth"
// figures (docs/serving.md, "Pipelined streaming").
#pragma once

#include <cstddef>

namespace qtts {

// GB/s (1e9 bytes per second) of `n_threads` threads summing disjoint parts of a buffer of
// `bytes`, the best of `passes` passes after one untimed pass that pages the buffer in.
double read_bandwidth(size_t bytes, int n_threads, int passes);

}  // namespace qtts
