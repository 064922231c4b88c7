#include "ops/attend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "ops/simd.h"
#include "runtime/error.h"

namespace qtts {

namespace {

// Sums in a fixed order, the same on every path: kLanes independent partial sums over whole
// chunks, folded in halves, then the tail in order. The file is compiled without contracted
// multiply-adds, so the vector paths compute exactly what the scalar loops say.
constexpr int kLanes = 16;

struct Dims {
    int64_t hd, n_head, n_kv_head, group, n, lanes, n_kv;
    const int32_t * pos;
    // the positions before lane l's new ones: its first query's position
    int64_t n_past(int64_t lane) const { return pos[lane * n]; }
    // whether lane l's new positions fit its window (checked by the caller; a row that does not
    // is left NaN rather than written out of bounds)
    bool fits(int64_t lane) const { return n_past(lane) >= 0 && n_past(lane) + n <= n_kv; }
};

Dims dims_of(const ggml_tensor * dst) {
    const ggml_tensor *q = dst->src[0], *K = dst->src[3];
    Dims d;
    d.hd = q->ne[0];
    d.n_head = q->ne[1];
    d.n_kv_head = K->ne[2];
    d.group = d.n_head / d.n_kv_head;
    d.lanes = K->ne[3];
    d.n = q->ne[2] / d.lanes;
    d.n_kv = K->ne[1];
    d.pos = static_cast<const int32_t *>(dst->src[5]->data);
    return d;
}

template <typename T>
inline T * at(const ggml_tensor * t, int64_t i1, int64_t i2, int64_t i3 = 0) {
    return reinterpret_cast<T *>(static_cast<char *>(t->data) + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3]);
}

[[gnu::always_inline]] inline float dot(const float * a, const float * b, int64_t n) {
    float acc[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
        for (int l = 0; l < kLanes; ++l) acc[l] += a[i + l] * b[i + l];
    }
    for (int w = kLanes / 2; w > 0; w /= 2) {
        for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
    }
    float s = acc[0];
    for (; i < n; ++i) s += a[i] * b[i];
    return s;
}

// Query rows are taken kRows at a time, so that a long prompt chunk reads each key and value
// row once per block of queries rather than once per query.
constexpr int64_t kRows = 8;

// Tasks [t0, t1) of (lane, block of up to kRows query rows, KV head), the KV head fastest, each
// with the query heads of its group. What a task computes for one query row and head depends on
// that row and head alone: the same sums in the same order whatever the blocks, the split over
// threads or the other lanes.
[[gnu::always_inline]] inline void attend_tasks(const ggml_tensor * dst, const Dims & d, int64_t t0, int64_t t1,
                                                std::vector<float> & w) {
    const ggml_tensor *q = dst->src[0], *k = dst->src[1], *v = dst->src[2], *K = dst->src[3], *V = dst->src[4];
    const float scale = 1.0f / std::sqrt(static_cast<float>(d.hd));
    const int64_t blocks = (d.n + kRows - 1) / kRows;
    for (int64_t t = t0; t < t1; ++t) {
        const int64_t g = t % d.n_kv_head, lane = t / d.n_kv_head / blocks, i0 = t / d.n_kv_head % blocks * kRows;
        const int64_t rows = std::min(kRows, d.n - i0), r0 = lane * d.n + i0;
        auto out = [&](int64_t ri) { return at<float>(dst, r0 + ri, 0) + g * d.group * d.hd; };
        if (!d.fits(lane)) {
            for (int64_t ri = 0; ri < rows; ++ri) std::fill(out(ri), out(ri) + d.group * d.hd, NAN);
            continue;
        }
        // query i0 + ri sees the positions up to n_past + i0 + ri
        const int64_t n_past = d.n_past(lane), m0 = n_past + i0 + 1, m_max = m0 + rows - 1;
        w.resize(static_cast<size_t>(rows * d.group * m_max));
        auto weights = [&](int64_t ri, int64_t e) { return w.data() + (ri * d.group + e) * m_max; };
        // keys before the new positions come from the cache, the new ones from k: this op writes
        // them there, and no thread reads a position another one writes
        auto row = [&](const ggml_tensor * cache, const ggml_tensor * fresh, int64_t j) {
            if (j < n_past) return at<const float>(cache, j, g, lane);
            return at<const float>(fresh, g, lane * d.n + j - n_past);
        };
        for (int64_t j = 0; j < m_max; ++j) {
            const float * kj = row(K, k, j);
            for (int64_t ri = std::max<int64_t>(0, j - m0 + 1); ri < rows; ++ri) {
                for (int64_t e = 0; e < d.group; ++e) {
                    weights(ri, e)[j] = dot(at<const float>(q, g * d.group + e, r0 + ri), kj, d.hd) * scale;
                }
            }
        }
        for (int64_t ri = 0; ri < rows; ++ri) {
            const int64_t m = m0 + ri;
            for (int64_t e = 0; e < d.group; ++e) {
                float * we = weights(ri, e);
                float mx = -INFINITY;
                for (int64_t j = 0; j < m; ++j) mx = we[j] > mx ? we[j] : mx;
                float sum = 0.0f;
                for (int64_t j = 0; j < m; ++j) {
                    we[j] = std::exp(we[j] - mx);
                    sum += we[j];
                }
                const float inv = 1.0f / sum;
                for (int64_t j = 0; j < m; ++j) we[j] *= inv;
            }
            std::memset(out(ri), 0, static_cast<size_t>(d.group * d.hd) * sizeof(float));
        }
        for (int64_t j = 0; j < m_max; ++j) {
            const float * vj = row(V, v, j);
            for (int64_t ri = std::max<int64_t>(0, j - m0 + 1); ri < rows; ++ri) {
                for (int64_t e = 0; e < d.group; ++e) {
                    const float p = weights(ri, e)[j];
                    float * oe = out(ri) + e * d.hd;
                    for (int64_t c = 0; c < d.hd; ++c) oe[c] += p * vj[c];
                }
            }
        }
    }
}

void attend_scalar(const ggml_tensor * dst, const Dims & d, int64_t t0, int64_t t1, std::vector<float> & w) {
    attend_tasks(dst, d, t0, t1, w);
}

#ifdef QTTS_X86
QTTS_AVX2 void attend_avx2(const ggml_tensor * dst, const Dims & d, int64_t t0, int64_t t1, std::vector<float> & w) {
    attend_tasks(dst, d, t0, t1, w);
}

QTTS_AVX512 void attend_avx512(const ggml_tensor * dst, const Dims & d, int64_t t0, int64_t t1,
                               std::vector<float> & w) {
    attend_tasks(dst, d, t0, t1, w);
}
#endif

void attend_op(ggml_tensor * dst, int ith, int nth, void *) {
    const ggml_tensor *k = dst->src[1], *v = dst->src[2], *K = dst->src[3], *V = dst->src[4];
    const Dims d = dims_of(dst);
    // the new keys and values into the cache, rows split over the threads
    const int64_t rows = d.n * d.lanes, row_bytes = d.hd * static_cast<int64_t>(sizeof(float));
    for (int64_t r = rows * ith / nth; r < rows * (ith + 1) / nth; ++r) {
        const int64_t lane = r / d.n, j = d.n_past(lane) + r % d.n;
        if (!d.fits(lane)) continue;
        for (int64_t g = 0; g < d.n_kv_head; ++g) {
            std::memcpy(at<float>(K, j, g, lane), at<const float>(k, g, r), row_bytes);
            std::memcpy(at<float>(V, j, g, lane), at<const float>(v, g, r), row_bytes);
        }
    }
    thread_local std::vector<float> w;
    const int64_t tasks = d.lanes * ((d.n + kRows - 1) / kRows) * d.n_kv_head;
    const int64_t t0 = tasks * ith / nth, t1 = tasks * (ith + 1) / nth;
    switch (simd_path()) {
#ifdef QTTS_X86
        case SimdPath::amx:
        case SimdPath::avx512: return attend_avx512(dst, d, t0, t1, w);
        case SimdPath::avx2: return attend_avx2(dst, d, t0, t1, w);
#endif
        default: return attend_scalar(dst, d, t0, t1, w);
    }
}

void check_f32(const ggml_tensor * t, const char * what) {
    if (t->type != GGML_TYPE_F32 || t->nb[0] != sizeof(float)) {
        fail("attend_cached: %s '%s' must be F32 with contiguous rows", what, t->name);
    }
}

}  // namespace

ggml_tensor * attend_cached(ggml_context * ctx, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v, ggml_tensor * K,
                            ggml_tensor * V, ggml_tensor * pos) {
    check_f32(q, "q");
    check_f32(k, "k");
    check_f32(v, "v");
    check_f32(K, "K cache");
    check_f32(V, "V cache");
    const int64_t hd = q->ne[0], n_all = q->ne[2], nkv = K->ne[2], lanes = K->ne[3];
    if (q->ne[3] != 1 || q->ne[1] % nkv != 0) {
        fail("attend_cached: q '%s' must be [head_dim, n_head, positions] with n_head a multiple of %lld", q->name,
             static_cast<long long>(nkv));
    }
    if (K->ne[0] != hd || !ggml_are_same_shape(K, V)) {
        fail("attend_cached: the cache windows '%s' and '%s' must both be [%lld, n_kv, n_head_kv, lanes]", K->name,
             V->name, static_cast<long long>(hd));
    }
    if (lanes < 1 || n_all % lanes != 0 || n_all / lanes > K->ne[1]) {
        fail("attend_cached: %lld positions in %lld lanes do not fit windows of %lld", static_cast<long long>(n_all),
             static_cast<long long>(lanes), static_cast<long long>(K->ne[1]));
    }
    for (const ggml_tensor * t : {k, v}) {
        if (t->ne[0] != hd || t->ne[1] != nkv || t->ne[2] != n_all || t->ne[3] != 1) {
            fail("attend_cached: '%s' must be [%lld, %lld, %lld]", t->name, static_cast<long long>(hd),
                 static_cast<long long>(nkv), static_cast<long long>(n_all));
        }
    }
    if (pos->type != GGML_TYPE_I32 || !ggml_is_contiguous(pos) || ggml_nelements(pos) != n_all) {
        fail("attend_cached: positions '%s' must be %lld contiguous I32 values", pos->name,
             static_cast<long long>(n_all));
    }
    ggml_tensor * args[6] = {q, k, v, K, V, pos};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, hd * q->ne[1], n_all, 1, 1, args, 6, attend_op, GGML_N_TASKS_MAX,
                          nullptr);
}

}  // namespace qtts
