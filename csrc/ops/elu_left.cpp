#include "ops/elu_left.h"

#include <cmath>
#include <cstring>

#include "ops/layout.h"
#include "ops/neon.h"
#include "ops/simd.h"
#include "runtime/error.h"

namespace qtts {

namespace {

void elu_row_scalar(const float * x, float * y, int64_t c0, int64_t n) {
    for (int64_t c = c0; c < n; ++c) y[c] = x[c] > 0.0f ? x[c] : std::expm1(x[c]);
}

#ifdef QTTS_X86
// expm1(x) for x <= 0 as 2^k (p(r) + 1) - 1 with x = k ln2 + r, |r| <= ln2/2 and p the degree-7
// Taylor polynomial of expm1 (error < 2e-9 on that range); k = 0 leaves p(r) itself, so small
// inputs keep their relative precision. Below -87 the result is -1 in float anyway.
QTTS_AVX2 void elu_row_avx2(const float * x, float * y, int64_t n) {
    const __m256 zero = _mm256_setzero_ps(), lo = _mm256_set1_ps(-87.0f), log2e = _mm256_set1_ps(1.44269504089f);
    const __m256 ln2_hi = _mm256_set1_ps(0.693359375f), ln2_lo = _mm256_set1_ps(-2.12194440e-4f);
    const __m256 one = _mm256_set1_ps(1.0f);
    int64_t c = 0;
    for (; c + 8 <= n; c += 8) {
        const __m256 xv = _mm256_loadu_ps(x + c);
        const __m256 z = _mm256_max_ps(_mm256_min_ps(xv, zero), lo);
        const __m256 k = _mm256_round_ps(_mm256_mul_ps(z, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        const __m256 r = _mm256_fnmadd_ps(k, ln2_lo, _mm256_fnmadd_ps(k, ln2_hi, z));
        __m256 p = _mm256_set1_ps(1.0f / 5040);
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
        p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, r);
        const __m256 s =
            _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23));
        const __m256 em1 = _mm256_fmadd_ps(s, p, _mm256_sub_ps(s, one));
        _mm256_storeu_ps(y + c, _mm256_blendv_ps(em1, xv, _mm256_cmp_ps(xv, zero, _CMP_GT_OQ)));
    }
    elu_row_scalar(x, y, c, n);
}
#endif

void elu_left_op(ggml_tensor * dst, int ith, int nth, void *) {
    const ggml_tensor *x = dst->src[0], *left = dst->src[1];
    const int64_t C = dst->ne[0], n = x->ne[1], P = left ? left->ne[1] : 0, rows = dst->ne[1];
    [[maybe_unused]] const SimdPath path = simd_path();
    for (int64_t r = rows * ith / nth; r < rows * (ith + 1) / nth; ++r) {
        float * y = reinterpret_cast<float *>(static_cast<char *>(dst->data) + r * dst->nb[1]);
        if (r < P) {
            std::memcpy(y, static_cast<const char *>(left->data) + r * left->nb[1], C * sizeof(float));
        } else if (r < P + n) {
            const float * xr = reinterpret_cast<const float *>(static_cast<const char *>(x->data) + (r - P) * x->nb[1]);
#ifdef QTTS_X86
            if (x86_has(path, SimdPath::avx2)) {
                elu_row_avx2(xr, y, C);
                continue;
            }
#endif
#ifdef QTTS_NEON
            if (path == SimdPath::neon) {
                elu_row_scalar(xr, y, elu_row_neon(xr, y, C), C);
                continue;
            }
#endif
            elu_row_scalar(xr, y, 0, C);
        } else {
            std::memset(y, 0, C * sizeof(float));
        }
    }
}

}  // namespace

ggml_tensor * elu_left(ggml_context * ctx, ggml_tensor * x, ggml_tensor * left, int64_t pad) {
    const int64_t C = x->ne[0], P = left ? left->ne[1] : 0;
    if (!rows_contiguous(x) || pad < 0 || (left && (left->ne[0] != C || !rows_contiguous(left)))) {
        fail("elu_left: inconsistent operands");
    }
    ggml_tensor * args[2] = {x, left};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, C, P + x->ne[1] + pad, 1, 1, args, left ? 2 : 1, elu_left_op,
                          GGML_N_TASKS_MAX, nullptr);
}

}  // namespace qtts
