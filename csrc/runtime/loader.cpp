#include "runtime/loader.h"

#include <climits>

namespace qtts {

ggml_tensor * load_panels(GgufFile & f, const std::string & name, int64_t k, int64_t in, int64_t n) {
    const int64_t p = n % kPanelWidth == 0 ? kPanelWidth : n;
    return f.tensor(name, {p, in, k, n / p}, WeightKind::F32);
}

int64_t product(const std::vector<int> & v) {
    int64_t p = 1;
    for (int x : v) {
        p *= x;
        if (p > INT32_MAX) return -1;
    }
    return p;
}

}  // namespace qtts
