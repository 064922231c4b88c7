#include "runtime/membw.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "runtime/error.h"
#include "runtime/host_memory.h"

namespace qtts {

namespace {

// Eight independent accumulators so that the compiler vectorizes the loop (-O3) and the sum is
// limited by loads, not by the latency of one add chain.
float sum_range(const float * p, size_t n) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        for (int k = 0; k < 8; ++k) acc[k] += p[i + k];
    }
    for (; i < n; ++i) acc[0] += p[i];
    float s = 0;
    for (float a : acc) s += a;
    return s;
}

}  // namespace

double read_bandwidth(size_t bytes, int n_threads, int passes) {
    if (n_threads < 1 || n_threads > 1024) fail("n_threads must be between 1 and 1024, got %d", n_threads);
    if (passes < 1) fail("passes must be at least 1, got %d", passes);
    if (bytes < (1u << 20) || bytes > (size_t(16) << 30)) fail("bytes must be between 1 MiB and 16 GiB");
    const size_t n = bytes / sizeof(float);
    // in huge pages where the model's streamed weights are (runtime/host_memory.h): the limit
    // they are measured against
    std::unique_ptr<HugePageBuffer> huge;
    std::vector<float> small;
    float * data = nullptr;
    if (huge_pages_available()) {
        huge = std::make_unique<HugePageBuffer>(n * sizeof(float));
        data = reinterpret_cast<float *>(huge->data());
    } else {
        small.resize(n);
        data = small.data();
    }
    std::fill(data, data + n, 1.0f);
    std::vector<float> sums(static_cast<size_t>(n_threads));
    double best = 0.0;
    for (int pass = 0; pass <= passes; ++pass) {
        const auto t0 = std::chrono::steady_clock::now();
        std::vector<std::thread> workers;
        for (int t = 0; t < n_threads; ++t) {
            const size_t lo = n * t / n_threads, hi = n * (t + 1) / n_threads;
            workers.emplace_back([&, t, lo, hi] { sums[t] = sum_range(data + lo, hi - lo); });
        }
        for (auto & w : workers) w.join();
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (pass > 0) best = std::max(best, static_cast<double>(n * sizeof(float)) / s / 1e9);
    }
    // The sums feed the result (by a factor that is always 0) so the loads cannot be dropped.
    float total = 0;
    for (float v : sums) total += v;
    return best + (total < 0 ? 1e-9 : 0.0);
}

}  // namespace qtts
