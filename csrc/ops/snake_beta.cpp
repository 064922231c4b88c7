#include "ops/snake_beta.h"

#include <cmath>
#include <cstring>

#include "ops/layout.h"
#include "ops/neon.h"
#include "ops/simd.h"
#include "ops/snake_math.h"
#include "runtime/error.h"

namespace qtts {

namespace {

using namespace sin2_consts;

inline float sin2(float z) {
    const float j = std::nearbyint(z * kTwoOverPi);
    const float r = ((z - j * kPio2A) - j * kPio2B) - j * kPio2C, r2 = r * r;
    const float v = (static_cast<long>(j) & 1) ? 1.0f - 0.5f * r2 + r2 * r2 * (kC1 + r2 * (kC2 + r2 * kC3))
                                               : r + r * r2 * (kS1 + r2 * (kS2 + r2 * kS3));
    return v * v;
}

void snake_row_scalar(const float * x, const float * ea, const float * ib, float * y, int64_t c0, int64_t n) {
    for (int64_t c = c0; c < n; ++c) y[c] = x[c] + ib[c] * sin2(x[c] * ea[c]);
}

#ifdef QTTS_X86
QTTS_AVX2 void snake_row_avx2(const float * x, const float * ea, const float * ib, float * y, int64_t n) {
    const __m256 two_pi = _mm256_set1_ps(kTwoOverPi), one = _mm256_set1_ps(1.0f), half = _mm256_set1_ps(0.5f);
    int64_t c = 0;
    for (; c + 8 <= n; c += 8) {
        const __m256 xv = _mm256_loadu_ps(x + c), z = _mm256_mul_ps(xv, _mm256_loadu_ps(ea + c));
        const __m256 j = _mm256_round_ps(_mm256_mul_ps(z, two_pi), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m256 r = _mm256_fnmadd_ps(j, _mm256_set1_ps(kPio2A), z);
        r = _mm256_fnmadd_ps(j, _mm256_set1_ps(kPio2B), r);
        r = _mm256_fnmadd_ps(j, _mm256_set1_ps(kPio2C), r);
        const __m256 r2 = _mm256_mul_ps(r, r);
        __m256 s = _mm256_fmadd_ps(r2, _mm256_set1_ps(kS3), _mm256_set1_ps(kS2));
        s = _mm256_fmadd_ps(r2, s, _mm256_set1_ps(kS1));
        s = _mm256_fmadd_ps(_mm256_mul_ps(r, r2), s, r);
        __m256 co = _mm256_fmadd_ps(r2, _mm256_set1_ps(kC3), _mm256_set1_ps(kC2));
        co = _mm256_fmadd_ps(r2, co, _mm256_set1_ps(kC1));
        co = _mm256_fmadd_ps(_mm256_mul_ps(r2, r2), co, _mm256_fnmadd_ps(half, r2, one));
        const __m256i odd = _mm256_slli_epi32(_mm256_cvtps_epi32(j), 31);
        const __m256 v = _mm256_blendv_ps(s, co, _mm256_castsi256_ps(odd));
        _mm256_storeu_ps(y + c, _mm256_fmadd_ps(_mm256_loadu_ps(ib + c), _mm256_mul_ps(v, v), xv));
    }
    snake_row_scalar(x, ea, ib, y, c, n);
}

// The same per-lane operations as snake_row_avx2 on 16 lanes (bit-identical results); the rest
// of the row goes through snake_row_avx2, so every element takes the path it would take there.
QTTS_AVX512 void snake_row_avx512(const float * x, const float * ea, const float * ib, float * y, int64_t n) {
    const __m512 two_pi = _mm512_set1_ps(kTwoOverPi), one = _mm512_set1_ps(1.0f), half = _mm512_set1_ps(0.5f);
    int64_t c = 0;
    for (; c + 16 <= n; c += 16) {
        const __m512 xv = _mm512_loadu_ps(x + c), z = _mm512_mul_ps(xv, _mm512_loadu_ps(ea + c));
        const __m512 j = _mm512_roundscale_ps(_mm512_mul_ps(z, two_pi), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m512 r = _mm512_fnmadd_ps(j, _mm512_set1_ps(kPio2A), z);
        r = _mm512_fnmadd_ps(j, _mm512_set1_ps(kPio2B), r);
        r = _mm512_fnmadd_ps(j, _mm512_set1_ps(kPio2C), r);
        const __m512 r2 = _mm512_mul_ps(r, r);
        __m512 s = _mm512_fmadd_ps(r2, _mm512_set1_ps(kS3), _mm512_set1_ps(kS2));
        s = _mm512_fmadd_ps(r2, s, _mm512_set1_ps(kS1));
        s = _mm512_fmadd_ps(_mm512_mul_ps(r, r2), s, r);
        __m512 co = _mm512_fmadd_ps(r2, _mm512_set1_ps(kC3), _mm512_set1_ps(kC2));
        co = _mm512_fmadd_ps(r2, co, _mm512_set1_ps(kC1));
        co = _mm512_fmadd_ps(_mm512_mul_ps(r2, r2), co, _mm512_fnmadd_ps(half, r2, one));
        const __mmask16 odd = _mm512_test_epi32_mask(_mm512_cvtps_epi32(j), _mm512_set1_epi32(1));
        const __m512 v = _mm512_mask_blend_ps(odd, s, co);
        _mm512_storeu_ps(y + c, _mm512_fmadd_ps(_mm512_loadu_ps(ib + c), _mm512_mul_ps(v, v), xv));
    }
    if (c < n) snake_row_avx2(x + c, ea + c, ib + c, y + c, n - c);
}
#endif

void snake_op(ggml_tensor * dst, int ith, int nth, void *) {
    const ggml_tensor *x = dst->src[0], *ea = dst->src[1], *ib = dst->src[2], *left = dst->src[3];
    [[maybe_unused]] const SimdPath path = simd_path();
    const int64_t C = dst->ne[0], n = x->ne[1], P = dst->ne[1] - n, rows = dst->ne[1];
    const int64_t r0 = rows * ith / nth, r1 = rows * (ith + 1) / nth;
    const float *a = static_cast<const float *>(ea->data), *b = static_cast<const float *>(ib->data);
    for (int64_t r = r0; r < r1; ++r) {
        float * y = reinterpret_cast<float *>(static_cast<char *>(dst->data) + r * dst->nb[1]);
        if (r < P) {
            std::memcpy(y, static_cast<const char *>(left->data) + r * left->nb[1], C * sizeof(float));
            continue;
        }
        const float * xr = reinterpret_cast<const float *>(static_cast<const char *>(x->data) + (r - P) * x->nb[1]);
#ifdef QTTS_X86
        if (x86_has(path, SimdPath::avx512)) {
            snake_row_avx512(xr, a, b, y, C);
            continue;
        }
        if (path == SimdPath::avx2) {
            snake_row_avx2(xr, a, b, y, C);
            continue;
        }
#endif
#ifdef QTTS_NEON
        if (path == SimdPath::neon) {
            snake_row_scalar(xr, a, b, y, snake_row_neon(xr, a, b, y, C), C);
            continue;
        }
#endif
        snake_row_scalar(xr, a, b, y, 0, C);
    }
}

}  // namespace

ggml_tensor * snake_beta(ggml_context * ctx, ggml_tensor * x, ggml_tensor * exp_alpha, ggml_tensor * inv_beta,
                         ggml_tensor * left) {
    const int64_t C = x->ne[0], P = left ? left->ne[1] : 0;
    if (!rows_contiguous(x) || exp_alpha->ne[0] != C || inv_beta->ne[0] != C || (left && left->ne[0] != C) ||
        !ggml_is_contiguous(exp_alpha) || !ggml_is_contiguous(inv_beta) || (left && !rows_contiguous(left))) {
        fail("snake_beta: inconsistent operands");
    }
    ggml_tensor * args[4] = {x, exp_alpha, inv_beta, left};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, C, P + x->ne[1], 1, 1, args, left ? 4 : 3, snake_op, GGML_N_TASKS_MAX,
                          nullptr);
}

}  // namespace qtts
