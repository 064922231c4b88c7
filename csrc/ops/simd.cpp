#include "ops/simd.h"

#include <atomic>

#include "ops/qmatmul_impl.h"
#include "runtime/error.h"

namespace qtts {

namespace {

std::atomic<SimdPath> & current() {
    static std::atomic<SimdPath> path{best_simd_path()};
    return path;
}

}  // namespace

SimdPath best_simd_path() {
#ifdef QTTS_X86
    static const SimdPath best = [] {
        if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return SimdPath::scalar;
        if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512vl")) return SimdPath::avx2;
        return qmm::cpu_has_amx() ? SimdPath::amx : SimdPath::avx512;
    }();
    return best;
#elif defined(QTTS_NEON)
    return SimdPath::neon;
#else
    return SimdPath::scalar;
#endif
}

bool simd_path_available(SimdPath path) {
    if (path == SimdPath::scalar || path == best_simd_path()) return true;
    return best_simd_path() != SimdPath::neon && path != SimdPath::neon && path < best_simd_path();
}

SimdPath simd_path() { return current().load(std::memory_order_relaxed); }

void set_simd_path(SimdPath path) {
    if (!simd_path_available(path)) {
        fail("SIMD path '%s' is not available on this CPU (best: %s)", simd_path_name(path),
             simd_path_name(best_simd_path()));
    }
    current().store(path, std::memory_order_relaxed);
}

const char * simd_path_name(SimdPath path) {
    switch (path) {
        case SimdPath::avx2: return "avx2";
        case SimdPath::avx512: return "avx512";
        case SimdPath::amx: return "amx";
        case SimdPath::neon: return "neon";
        default: return "scalar";
    }
}

}  // namespace qtts
