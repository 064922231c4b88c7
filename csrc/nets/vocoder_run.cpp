// The vocoder's graph and its runners (docs/model.md, "Vocoder"; docs/serving.md, "Batched
// vocoder"). Activations are channel-fastest (ne = [C, T]); the convolutions and SnakeBeta come
// from CodecOps: on the native path conv_gemm over panel-packed weights and a SnakeBeta op that
// also writes the next conv's left context (ops/snake_beta.h), on the portable path their
// stock-op forms (ops/stock.h).
//
// A graph decodes frames of one or more segments ("lanes", one reference chunk of one stream
// each) from each segment's carried state and updates that state in place: each conv's last
// input rows are copied back, and the transformer's keys/values go to the segment's cache.
// Attention runs over the cache padded to a multiple of 32 keys with the padding masked: the
// padded keys only add exact zeros to the SIMD sums, so a frame's result does not depend on how
// many frames share its graph. With several lanes, the RVQ and every conv after the transformer
// run once over all lanes' rows: a conv with left context reads each lane's context followed by
// its rows, all lanes one after the other. On the native path a segmented conv_gemm computes
// only each lane's rows; the portable path computes the rows across a lane boundary too and drops
// them. Each output row is the same chain of float operations whatever rows surround it
// (ops/conv_gemm.h, "Determinism"), so a lane's samples are those it gets alone.
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "nets/vocoder.h"
#include "ops/stock.h"
#include "runtime/error.h"
#include "runtime/graph.h"

namespace qtts {

namespace {

constexpr float kConvNextEps = 1e-6f;
// A lane's frames per graph (4 s of audio): bounds the compute buffer, about 2.8 MB a frame.
constexpr int64_t kMaxGraphFrames = 50;
// All lanes' frames per graph: on the CPU's native path one lane's worth; on the portable path
// (a GPU, where each graph costs its launches and its build whatever its size) up to 8 lanes'
// worth, about 1.1 GB of compute buffer (docs/serving.md, "Batched vocoder").
constexpr int64_t kMaxPortableGraphFrames = 8 * kMaxGraphFrames;
// Lanes per graph: each adds its cache writes, its attention and its conv contexts (about 200
// nodes with views), within kMaxNodes.
constexpr size_t kMaxGraphLanes = 16;
constexpr int64_t kConvWarmup = 16;  // frames through the conv stack before the first kept one
// One stream's pushes of up to this many frames (a stream's chunks) replay their graphs.
constexpr int64_t kMaxReplayFrames = 8;

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// n frames of one segment in a graph; full = false stops after the transformer: it only advances
// the segment's state (the transformer's keys/values, the pre-conv context) for frames whose
// audio is not needed.
struct Lane {
    VocoderState * st = nullptr;
    const int32_t * codes = nullptr;
    int64_t n = 0;
    bool full = true;
};

// Where a lane's transformer attends: keys 0 .. n_kv - 1 of its cache, its new keys and values
// written at n_past (a graph for this n_past), or with `whole` the whole cache, written at rows
// given as inputs (a graph for any n_past: replayable).
int64_t attended(const Lane & ln, bool whole) {
    return whole ? ln.st->n_ctx : round_up(ln.st->n_past + ln.n, kVocoderKeyPad);
}

struct Builder {
    ggml_context * ctx;
    ggml_cgraph * gf;
    const Vocoder & w;
    CodecOps ops;
    const std::vector<Lane> & lanes;
    bool whole;
    std::vector<VocoderState *> st;  // the lanes through the conv stack (full)
    std::vector<int64_t> rows;       // their rows at the current rate, lane after lane
    std::vector<std::pair<std::string, std::vector<int32_t>>> index;  // the row gathers' inputs

    ggml_tensor * index_input(std::vector<int32_t> idx) {
        std::string name = format("cd.rows%zu", index.size());
        ggml_tensor * t = input(ggml_new_tensor_1d(ctx, GGML_TYPE_I32, static_cast<int64_t>(idx.size())), name.c_str());
        index.emplace_back(std::move(name), std::move(idx));
        return t;
    }

    // x: the lanes' rows (n[i] each, lane after lane) -> each lane's left context (lefts[i], p
    // rows), then its rows; the last p rows of each lane's part go back to its context.
    ggml_tensor * join(ggml_tensor * x, const std::vector<ggml_tensor *> & lefts, const std::vector<int64_t> & n) {
        if (lefts.size() == 1) {
            ggml_tensor * xp = ggml_concat(ctx, lefts[0], x, 1);
            keep(ctx, gf, xp, lefts[0]);
            return xp;
        }
        const int64_t p = lefts[0]->ne[1], nl = static_cast<int64_t>(lefts.size());
        std::vector<int32_t> idx;
        ggml_tensor * xp = nullptr;
        if (ops.portable) {
            for (int64_t i = 0, at = nl * p; i < nl; at += n[i], ++i) {
                for (int64_t j = 0; j < p; ++j) idx.push_back(static_cast<int32_t>(i * p + j));
                for (int64_t t = 0; t < n[i]; ++t) idx.push_back(static_cast<int32_t>(at + t));
            }
            xp = ggml_get_rows(ctx, ggml_concat(ctx, concat_rows(ctx, lefts), x, 1), index_input(std::move(idx)));
        } else {
            // ggml's CPU concat copies element by element on one thread (a large share of a
            // batched push): instead one row gather of x to the lanes' places, the contexts' rows
            // holding row 0 until each context is written over them in place
            for (int64_t i = 0, at = 0; i < nl; at += n[i], ++i) {
                idx.insert(idx.end(), static_cast<size_t>(p), 0);
                for (int64_t t = 0; t < n[i]; ++t) idx.push_back(static_cast<int32_t>(at + t));
            }
            xp = ggml_get_rows(ctx, x, index_input(std::move(idx)));
            for (int64_t i = 0, at = 0; i < nl; at += p + n[i], ++i)
                xp = ggml_set_2d_inplace(ctx, xp, lefts[i], xp->nb[1], at * xp->nb[1]);
        }
        for (int64_t i = 0, at = 0; i < nl; at += p + n[i], ++i) {
            keep(ctx, gf, ggml_view_2d(ctx, xp, xp->ne[0], p + n[i], xp->nb[1], at * xp->nb[1]), lefts[i]);
        }
        return xp;
    }

    // The rows of an op over join()'s result whose window spans p rows: each lane's n[i] rows,
    // without the p rows computed across the boundary to the next lane.
    ggml_tensor * gather(ggml_tensor * y, int64_t p, const std::vector<int64_t> & n) {
        if (n.size() == 1) return y;
        std::vector<int32_t> idx;
        for (size_t i = 0, at = 0; i < n.size(); at += n[i] + p, ++i) {
            for (int64_t t = 0; t < n[i]; ++t) idx.push_back(static_cast<int32_t>(at + t));
        }
        return ggml_get_rows(ctx, y, index_input(std::move(idx)));
    }

    // A conv whose window spans p rows over join()'s result: each lane's n[i] rows. The native
    // path computes only those (a segmented conv_gemm); the portable one computes the rows across
    // each lane boundary too and drops them.
    ggml_tensor * conv_joined(ggml_tensor * xp, ggml_tensor * panel, int64_t p, ggml_tensor * b,
                              const std::vector<int64_t> & n) {
        if (n.size() == 1 || ops.portable) return gather(ops.conv(xp, panel, xp->ne[1] - p, b, nullptr), p, n);
        const int64_t m = xp->ne[1] - p * static_cast<int64_t>(n.size());
        return ops.conv_segments(xp, panel, index_input(std::vector<int32_t>(n.begin(), n.end())), m, b);
    }

    template <typename F> std::vector<ggml_tensor *> lefts(F of) const {
        std::vector<ggml_tensor *> out;
        for (VocoderState * s : st) out.push_back(of(*s));
        return out;
    }

    // A causal conv of kernel k (dilation inferred from the context) over the conv-stack lanes.
    ggml_tensor * conv_left(ggml_tensor * x, ggml_tensor * panel, ggml_tensor * b,
                            const std::vector<ggml_tensor *> & l) {
        return conv_joined(join(x, l, rows), panel, l[0]->ne[1], b, rows);
    }

    // SnakeBeta of x, each lane's part preceded by its carried context (l; none: x alone).
    ggml_tensor * snake(ggml_tensor * x, const Snake & s, const std::vector<ggml_tensor *> & l) {
        if (l.empty()) return ops.snake(x, s.exp_alpha, s.inv_beta, nullptr);
        if (l.size() > 1) return join(ops.snake(x, s.exp_alpha, s.inv_beta, nullptr), l, rows);
        ggml_tensor * y = ops.snake(x, s.exp_alpha, s.inv_beta, l[0]);
        keep(ctx, gf, y, l[0]);
        return y;
    }

    ggml_tensor * rvq(ggml_tensor * codes) {
        auto embd = [&](int g) { return ggml_get_rows(ctx, w.codebooks[g], index_row(ctx, codes, g)); };
        ggml_tensor * rest = embd(1);
        for (int g = 2; g < w.n_quantizers; ++g) rest = ggml_add(ctx, rest, embd(g));
        return named(ggml_add(ctx, mul_mat(ctx, w.rvq_first_out, embd(0)), mul_mat(ctx, w.rvq_rest_out, rest)),
                     "cd.rvq");
    }

    // The transformer over every lane's rows (x, lane after lane, at positions "cd.pos"): each
    // lane attends its own cache under its mask "cd.mask<i>", every other op runs once for all.
    ggml_tensor * transformer(ggml_tensor * x) {
        const TransformerHParams & hp = w.tfm.hp;
        int64_t n_all = 0;
        std::vector<KvSegment> segs;
        for (size_t i = 0; i < lanes.size(); ++i) {
            const Lane & ln = lanes[i];
            const int64_t n_kv = attended(ln, whole);
            KvSegment & sg = segs.emplace_back();
            sg.kv = KvWindow{&ln.st->k, &ln.st->v, ln.st->n_past, n_kv};
            sg.mask = input(ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n_kv, ln.n), format("cd.mask%zu", i).c_str());
            sg.n = ln.n;
            n_all += ln.n;
        }
        std::vector<KvRows> rows(whole ? lanes.size() : 0);
        for (size_t i = 0; i < rows.size(); ++i) {
            const int64_t n = lanes[i].n;
            rows[i].k = input(ggml_new_tensor_1d(ctx, GGML_TYPE_I64, n), format("cd.kv_rows_k%zu", i).c_str());
            rows[i].v = input(ggml_new_tensor_1d(ctx, GGML_TYPE_I64, int64_t(hp.head_dim) * hp.n_head_kv * n),
                              format("cd.kv_rows_v%zu", i).c_str());
            segs[i].kv.rows = &rows[i];
        }
        ggml_tensor * pos = input(ggml_new_tensor_1d(ctx, GGML_TYPE_I32, n_all), "cd.pos");
        x = linear(ctx, x, w.tfm_in, w.tfm_in_b);
        StackOptions o;
        o.prefix = "cd.tfm";
        o.segments = &segs;
        o.portable = ops.portable;
        x = transformer_stack(ctx, gf, x, pos, w.tfm, o);
        return named(linear(ctx, rms_norm(ctx, x, w.tfm_norm, hp.eps), w.tfm_out, w.tfm_out_b), "cd.tfm");
    }

    // Causal ConvTranspose with kernel = stride: one GEMM whose tap-major outputs are the frames.
    ggml_tensor * upsample(ggml_tensor * x, int i) {
        const Vocoder::Upsample & u = w.upsample[i];
        const int64_t C = w.latent_dim, ratio = w.upsampling_ratios[i], n = x->ne[1] * ratio;
        x = ggml_add(ctx, ggml_reshape_2d(ctx, ops.conv(x, u.conv, x->ne[1], nullptr, nullptr), C, n), u.conv_b);
        for (int64_t & r : rows) r *= ratio;
        // ConvNeXt: causal depthwise k7 as a sum of shifted rows, then LayerNorm over channels
        ggml_tensor * xp = join(x, lefts([&](VocoderState & s) { return s.up[i]; }), rows);
        const int64_t m = xp->ne[1] - (kConvNextKernel - 1);
        ggml_tensor * h = nullptr;
        for (int64_t k = 0; k < kConvNextKernel; ++k) {
            ggml_tensor * tap = ggml_mul(ctx, ggml_view_2d(ctx, xp, C, m, xp->nb[1], k * xp->nb[1]),
                                         ggml_view_1d(ctx, u.dwconv, C, k * u.dwconv->nb[1]));
            h = h ? ggml_add(ctx, h, tap) : tap;
        }
        h = ggml_add(ctx, gather(h, kConvNextKernel - 1, rows), u.dwconv_b);
        h = ggml_add(ctx, ggml_mul(ctx, ggml_norm(ctx, h, kConvNextEps), u.norm), u.norm_b);
        h = ops.conv(ggml_gelu_erf(ctx, ops.conv(h, u.pw1, n, u.pw1_b, nullptr)), u.pw2, n, u.pw2_b, nullptr);
        return named(ggml_add(ctx, x, ggml_mul(ctx, h, u.gamma)), "cd.up%d", i);
    }

    // SnakeBeta, causal ConvTranspose (kernel 2r, stride r, r trimmed on the right) as one GEMM
    // over the frames and their predecessor plus an add of the two halves, 3 residual units.
    ggml_tensor * voc_block(ggml_tensor * x, int b) {
        const Vocoder::VocBlock & blk = w.voc[b];
        const int64_t n = x->ne[1], r = w.upsample_rates[b], C = w.decoder_dim >> (b + 1);
        ggml_tensor * xp = snake(x, blk.snake, lefts([&](VocoderState & s) { return s.blocks[b].up; }));
        ggml_tensor * y = ops.conv(xp, blk.up, xp->ne[1], nullptr, nullptr);
        // every pair of successive rows (each lane's n[i], and one across each boundary between
        // lanes, dropped after the add): taps 0..r-1 of frame t plus taps r..2r-1 of frame t-1
        const size_t cb = C * sizeof(float);
        const int64_t pairs = y->ne[1] - 1;
        ggml_tensor * cur = ggml_view_3d(ctx, y, C, r, pairs, cb, y->nb[1], y->nb[1]);
        ggml_tensor * prev = ggml_view_3d(ctx, y, C, r, pairs, cb, y->nb[1], r * cb);
        ggml_tensor * sum = gather(ggml_reshape_2d(ctx, ggml_add(ctx, cur, prev), C * r, pairs), 1, rows);
        x = ggml_add(ctx, ggml_reshape_2d(ctx, sum, C, r * n), blk.up_b);
        for (int64_t & m : rows) m *= r;
        for (int j = 0; j < kResidualUnits; ++j) {
            const Vocoder::Residual & u = blk.res[j];
            ggml_tensor * xs = snake(x, u.snake1, lefts([&](VocoderState & s) { return s.blocks[b].res[j]; }));
            const int64_t p = (kVocKernel - 1) * kDilations[j];
            ggml_tensor * h = conv_joined(xs, u.conv1, p, u.conv1_b, rows);
            // the block's output is "cd.blk<b>.res2"
            x = named(ops.conv(snake(h, u.snake2, {}), u.conv2, r * n, u.conv2_b, x), "cd.blk%d.res%d", b, j);
        }
        return x;
    }

    ggml_tensor * build() {
        int64_t n_all = 0;
        std::vector<int64_t> n;
        std::vector<ggml_tensor *> pre;
        for (const Lane & ln : lanes) {
            n.push_back(ln.n);
            pre.push_back(ln.st->pre_conv);
            n_all += ln.n;
        }
        ggml_tensor * codes = input(ggml_new_tensor_2d(ctx, GGML_TYPE_I32, n_all, w.n_quantizers), "cd.codes");
        ggml_tensor * xp = join(rvq(codes), pre, n);
        ggml_tensor * x = named(conv_joined(xp, w.pre_conv, kPreConvKernel - 1, w.pre_conv_b, n), "cd.pre_conv");
        x = transformer(x);
        // the conv stack runs over the full lanes' rows only
        std::vector<int32_t> kept;
        for (size_t i = 0, at = 0; i < lanes.size(); at += lanes[i].n, ++i) {
            if (!lanes[i].full) continue;
            st.push_back(lanes[i].st);
            rows.push_back(lanes[i].n);
            for (int64_t t = 0; t < lanes[i].n; ++t) kept.push_back(static_cast<int32_t>(at + t));
        }
        if (kept.empty()) return x;
        if (static_cast<int64_t>(kept.size()) < n_all) x = ggml_get_rows(ctx, x, index_input(std::move(kept)));
        for (int i = 0; i < static_cast<int>(w.upsample.size()); ++i) x = upsample(x, i);
        x = named(conv_left(x, w.voc_in, w.voc_in_b, lefts([](VocoderState & s) { return s.voc_in; })), "cd.voc_in");
        for (int b = 0; b < static_cast<int>(w.voc.size()); ++b) x = voc_block(x, b);
        const int64_t C = x->ne[0];
        ggml_tensor * s = snake(x, w.out_snake, lefts([](VocoderState & v) { return v.out; }));
        const int64_t L = s->ne[1] - (kVocKernel - 1);
        // 1 output channel: ggml's mul_mat over overlapping rows beats a one-lane GEMM panel
        ggml_tensor * wav = ops.portable ? ops.conv(s, w.out_conv, L, nullptr, nullptr)
                                         : mul_mat(ctx, ggml_reshape_2d(ctx, w.out_conv, kVocKernel * C, 1),
                                                   overlapping_rows(ctx, s, kVocKernel * C, L));
        wav = gather(wav, kVocKernel - 1, rows);
        return named(ggml_clamp(ctx, ggml_add(ctx, wav, w.out_conv_b), -1.0f, 1.0f), "cd.wav");
    }
};

// One graph over `lanes`: the samples of the full lanes, lane after lane; each lane's state
// advanced by its frames.
std::vector<float> run_lanes(const Vocoder & w, const CodecRunner & r, const std::vector<Lane> & lanes,
                             const std::vector<std::string> & stages = {}, std::vector<CodecStage> * got = nullptr) {
    for (const Lane & ln : lanes) {
        if (round_up(ln.st->n_past + ln.n, kVocoderKeyPad) > ln.st->n_ctx) {
            fail("codec decoder: segment of %lld frames exceeds its cache",
                 static_cast<long long>(ln.st->n_past + ln.n));
        }
    }
    // One stream's push of a stream's chunk size (no stages read): the same graph, replayed, for
    // every push of that size into this state (docs/serving.md, "Batched vocoder").
    const bool whole = r.replay && stages.empty() && lanes.size() == 1 && lanes[0].n <= kMaxReplayFrames;
    std::vector<std::pair<std::string, std::vector<int32_t>>> index;
    const GraphBuild build = [&](ggml_context * ctx, ggml_cgraph * graph) {
        Builder b{ctx, graph, w, r.ops(ctx), lanes, whole, {}, {}, {}};
        ggml_tensor * out = b.build();
        index = std::move(b.index);
        for (const std::string & s : stages) {
            ggml_tensor * t = ggml_get_tensor(ctx, s.c_str());
            if (!t) fail("the codec decoder graph has no stage '%s'", s.c_str());
            ggml_set_output(t);
        }
        return out;
    };
    const GraphInputs inputs = [&](ggml_cgraph * graph) {
        const int64_t g = w.n_quantizers;
        int64_t n_all = 0;
        for (const Lane & ln : lanes) n_all += ln.n;
        std::vector<int32_t> ids(static_cast<size_t>(n_all * g)), pos(static_cast<size_t>(n_all));
        int64_t at = 0;
        for (size_t i = 0; i < lanes.size(); ++i) {
            const Lane & ln = lanes[i];
            const int64_t n = ln.n, n_past = ln.st->n_past, n_kv = attended(ln, whole);
            // query t (position p) sees keys p-window+1..p of its segment
            std::vector<float> mask(static_cast<size_t>(n * n_kv), -INFINITY);
            for (int64_t t = 0; t < n; ++t) {
                for (int64_t q = 0; q < g; ++q) ids[q * n_all + at + t] = ln.codes[t * g + q];
                const int64_t p = n_past + t;
                pos[at + t] = static_cast<int32_t>(p);
                for (int64_t j = std::max<int64_t>(0, p - w.sliding_window + 1); j <= p; ++j) mask[t * n_kv + j] = 0.0f;
            }
            set_input(graph, format("cd.mask%zu", i).c_str(), mask);
            if (whole) {  // keys at their positions; V, transposed, one element per value (KvRows)
                const TransformerHParams & hp = w.tfm.hp;
                const int64_t hd = hp.head_dim, nkv = hp.n_head_kv, n_ctx = ln.st->n_ctx;
                std::vector<int64_t> k_rows(static_cast<size_t>(n)), v_rows(static_cast<size_t>(hd * nkv * n));
                for (int64_t t = 0; t < n; ++t) {
                    k_rows[t] = n_past + t;
                    for (int64_t h = 0; h < nkv; ++h) {
                        for (int64_t c = 0; c < hd; ++c)
                            v_rows[(t * nkv + h) * hd + c] = (h * hd + c) * n_ctx + n_past + t;
                    }
                }
                set_input(graph, format("cd.kv_rows_k%zu", i).c_str(), k_rows);
                set_input(graph, format("cd.kv_rows_v%zu", i).c_str(), v_rows);
            }
            at += n;
        }
        set_input(graph, "cd.codes", ids);
        set_input(graph, "cd.pos", pos);
        for (const auto & in : index) set_input(graph, in.first.c_str(), in.second);
    };
    ggml_cgraph * gf = whole ? r.replay(format("vocoder/%llu/%lld/%d", static_cast<unsigned long long>(lanes[0].st->id),
                                               static_cast<long long>(lanes[0].n), lanes[0].full ? 1 : 0),
                                        build, inputs)
                             : r.run(build, inputs);
    for (const Lane & ln : lanes) ln.st->n_past += ln.n;
    if (got) {
        for (const std::string & s : stages) {
            got->push_back({ggml_graph_get_tensor(gf, s.c_str())->ne[0], read_tensor(gf, s.c_str())});
        }
    }
    return read_output(gf);
}

// A graph's worth of one stream's frames: `m` frames of chunk `chunk` (in its state slot; reset
// first when it starts the chunk), their samples from frame `skip` on kept when `full`.
struct Piece {
    VocoderPush * push = nullptr;
    int slot = 0;
    int64_t chunk = 0;
    bool reset = false;
    const int32_t * codes = nullptr;
    int64_t m = 0, skip = 0;
    bool full = true;
};

// Frames [f0, f0+n) of a stream: each chunk c (frames 300c.. 300c+299) is decoded by its own
// segment, fed from 25 frames earlier (c > 0) to warm it up, whose samples are dropped, as are
// those of frames before s.silent_until. Frames whose samples are dropped and that lie more than
// kConvWarmup frames before the first kept one only run up to the transformer: the conv stack
// after it forgets its input within a few frames (about 10 by its kernel sizes and rates), so
// its state at the first kept frame is bit-identical either way.
std::vector<Piece> plan(const Vocoder & w, VocoderPush & p) {
    CodecStream & s = *p.stream;
    const int64_t g = w.n_quantizers, f0 = s.n_frames, f1 = f0 + p.n;
    int64_t chunk[2] = {s.chunk[0], s.chunk[1]};
    std::vector<Piece> out;
    for (int64_t c = f0 / kDecodeChunk;; ++c) {
        const int64_t emit = std::max(c * kDecodeChunk, s.silent_until), end = c * kDecodeChunk + kDecodeChunk;
        const int64_t start = c * kDecodeChunk - std::min(c * kDecodeChunk, kDecodeContext);
        if (start >= f1) break;
        const int slot = static_cast<int>(c % 2);
        bool reset = chunk[slot] != c;
        chunk[slot] = c;
        const int64_t warm = std::max(start, emit - kConvWarmup);  // first frame through the whole decoder
        for (int64_t a = std::max(f0, start), b_end = std::min(f1, end); a < b_end;) {
            const bool full = a >= warm;
            const int64_t m = std::min(kMaxGraphFrames, (full ? b_end : std::min(b_end, warm)) - a);
            out.push_back({&p, slot, c, reset, p.codes + (a - f0) * g, m, std::max<int64_t>(0, emit - a), full});
            reset = false;
            a += m;
        }
    }
    s.n_frames = f1;
    return out;
}

void require_host_weights(const Vocoder & w, const CodecRunner & r) {
    if (!r.portable && !ggml_backend_buffer_is_host(w.pre_conv->buffer)) {
        throw EngineError("the codec decoder needs its weights in host memory, which this model's device did not allow",
                          {});
    }
}

}  // namespace

void vocoder_check_codes(const Vocoder & w, const std::vector<int32_t> & codes, int64_t n) {
    const int64_t g = w.n_quantizers;
    if (n < 0 || static_cast<int64_t>(codes.size()) != n * g) {
        fail("codes must have shape [n, %lld], got %zu values for %lld frames", static_cast<long long>(g), codes.size(),
             static_cast<long long>(n));
    }
    for (size_t i = 0; i < codes.size(); ++i) {
        if (codes[i] < 0 || codes[i] >= w.codebook_size) {
            fail("code %d at frame %lld, codebook %lld is outside [0, %d)", codes[i], static_cast<long long>(i / g),
                 static_cast<long long>(i % g), w.codebook_size);
        }
    }
}

void vocoder_push(const Vocoder & w, const CodecRunner & r, std::vector<VocoderPush> & pushes) {
    require_host_weights(w, r);
    for (size_t i = 0; i < pushes.size(); ++i) {
        if (!pushes[i].stream || pushes[i].n < 0) fail("vocoder_push: push %zu has no stream or a negative count", i);
        for (size_t j = 0; j < i; ++j) {
            if (pushes[j].stream == pushes[i].stream)
                fail("vocoder_push: pushes %zu and %zu name the same stream", j, i);
        }
    }
    std::vector<std::vector<Piece>> todo;
    for (VocoderPush & p : pushes) {
        p.out.clear();
        todo.push_back(plan(w, p));
    }
    const int64_t max_frames = r.portable ? kMaxPortableGraphFrames : kMaxGraphFrames;
    // Round k decodes the k-th piece of every stream that has one, as few graphs as hold them.
    for (size_t k = 0;; ++k) {
        std::vector<Piece *> round;
        for (std::vector<Piece> & t : todo) {
            if (k < t.size()) round.push_back(&t[k]);
        }
        if (round.empty()) break;
        for (size_t a = 0; a < round.size();) {
            std::vector<Lane> lanes;
            std::vector<Piece *> in;
            int64_t frames = 0;
            for (; a < round.size() && lanes.size() < kMaxGraphLanes; ++a) {
                Piece & pc = *round[a];
                if (!lanes.empty() && frames + pc.m > max_frames) break;
                CodecStream & s = *pc.push->stream;
                std::unique_ptr<VocoderState> & st = s.slot[pc.slot];
                if (pc.reset) {
                    if (!st) st = std::make_unique<VocoderState>(w, r.state_backend);
                    st->reset();
                    s.chunk[pc.slot] = pc.chunk;
                }
                lanes.push_back({st.get(), pc.codes, pc.m, pc.full});
                in.push_back(&pc);
                frames += pc.m;
            }
            const std::vector<float> wav = run_lanes(w, r, lanes);
            size_t at = 0;
            for (Piece * pc : in) {
                if (!pc->full) continue;
                const size_t len = static_cast<size_t>(pc->m * w.hop_length);
                const size_t skip = static_cast<size_t>(std::min(pc->skip, pc->m) * w.hop_length);
                pc->push->out.insert(pc->push->out.end(), wav.begin() + at + skip, wav.begin() + at + len);
                at += len;
            }
        }
    }
}

std::vector<float> vocoder_decode(const Vocoder & w, const CodecRunner & r, const std::vector<int32_t> & codes,
                                  int64_t n) {
    vocoder_check_codes(w, codes, n);
    if (n < 1) fail("decode needs at least one frame");
    CodecStream s;
    std::vector<VocoderPush> push(1);
    push[0] = {&s, codes.data(), n, {}};
    CodecRunner once = r;  // its state lives for this call only: nothing to replay
    once.replay = nullptr;
    vocoder_push(w, once, push);
    return std::move(push[0].out);
}

std::vector<CodecStage> vocoder_stages(const Vocoder & w, const CodecRunner & r, const std::vector<int32_t> & codes,
                                       int64_t n, const std::vector<std::string> & stages) {
    vocoder_check_codes(w, codes, n);
    if (n < 1 || n > kDecodeChunk) fail("decode_stages takes 1 to %lld frames", static_cast<long long>(kDecodeChunk));
    require_host_weights(w, r);
    VocoderState st(w, r.state_backend);
    std::vector<CodecStage> got;
    run_lanes(w, r, {{&st, codes.data(), n, true}}, stages, &got);
    return got;
}

// Spare states kept from closed streams: each holds the transformer's cache (tens of MB).
constexpr size_t kSpareStates = 2;

void VocoderStreams::open(int id, int64_t silent_frames) {
    if (silent_frames < 0) fail("decode_stream_reset: silent_frames must be >= 0");
    if (id < 0) fail("decode stream ids are >= 0, got %d", id);
    const bool fresh = by_id_.find(id) == by_id_.end();
    CodecStream & s = by_id_[id];
    for (int i = 0; fresh && i < 2 && !spare_.empty(); ++i) {  // reset before use: its chunk is -1
        s.slot[i] = std::move(spare_.back());
        spare_.pop_back();
    }
    s.n_frames = 0;
    s.silent_until = silent_frames;
    s.chunk[0] = s.chunk[1] = -1;
}

CodecStream & VocoderStreams::get(int id) {
    auto it = by_id_.find(id);
    if (it == by_id_.end()) {
        if (id != 0) fail("decode stream %d was not started (decode_stream_reset first)", id);
        it = by_id_.emplace(0, CodecStream{}).first;
    }
    return it->second;
}

void VocoderStreams::close(int id) {
    if (id == 0) {
        open(0, 0);
        return;
    }
    auto it = by_id_.find(id);
    if (it == by_id_.end()) fail("decode stream %d is not open", id);
    // the most recent kept (slot 1 under slot 0, so that open() gives each back to its slot)
    for (int i = 1; i >= 0; --i) {
        std::unique_ptr<VocoderState> & st = it->second.slot[i];
        if (!st) continue;
        if (spare_.size() == kSpareStates) spare_.erase(spare_.begin());
        spare_.push_back(std::move(st));
    }
    by_id_.erase(it);
}

}  // namespace qtts
