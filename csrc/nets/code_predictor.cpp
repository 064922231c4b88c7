#include "nets/code_predictor.h"

#include "nets/talker.h"
#include "runtime/error.h"
#include "runtime/gguf_file.h"
#include "runtime/loader.h"
#include "runtime/names.h"

namespace qtts {

void load_code_predictor(GgufFile & f, const Talker & t, CodePredictor & c) {
    c.tfm = load_transformer(f, kv::P_CODE_PRED, tn::CODE_PRED, /*has_context=*/true, LayerStyle::QWEN3);
    c.vocab = f.count(kv::CODE_PRED_VOCAB_SIZE, 1, kMaxVocab);
    const int64_t d = t.n_embd(), dc = c.tfm.hp.n_embd;
    c.output_norm = f.tensor(tn::CODE_PRED_OUTPUT_NORM, {dc}, WeightKind::F32);
    for (int j = 0; j + 1 < t.n_code_groups; ++j) {
        c.codec_embd.push_back(f.tensor(format(tn::CODE_PRED_CODEC_EMBD, j), {d, c.vocab}, WeightKind::TABLE));
        c.lm_head.push_back(f.tensor(format(tn::CODE_PRED_LM_HEAD, j), {dc, c.vocab}, WeightKind::MATMUL));
    }
    // 0.6B predictors are as wide as the talker (identity projection, no tensors)
    const bool proj = d != dc;
    c.mtp_proj = f.tensor(tn::CODE_PRED_MTP_PROJ, {d, dc}, WeightKind::MATMUL, proj);
    c.mtp_proj_b = f.tensor(tn::CODE_PRED_MTP_PROJ_B, {dc}, WeightKind::F32, proj);
}

namespace {

// One step's logits [vocab, lanes] for the code tensor `code` (I32 [lanes]); `pos` is made an
// input named kPredPos unless given.
ggml_tensor * predictor_logits(ggml_context * ctx, ggml_cgraph * gf, const CodePredictor & c, const Talker & t,
                               const KvCache & cache, int step, int64_t lanes, int64_t lane_stride, ggml_tensor * code,
                               ggml_tensor * hidden, ggml_tensor * pos, const char * rows_prefix) {
    ggml_tensor * x;
    if (step == 0) {
        // per lane the two positions [h, C(cb0)]
        const int64_t d = t.n_embd();
        ggml_tensor * e = ggml_get_rows(ctx, t.codec_embd, code);
        x = ggml_concat(ctx, ggml_reshape_3d(ctx, hidden, d, 1, lanes), ggml_reshape_3d(ctx, e, d, 1, lanes), 1);
        x = ggml_reshape_2d(ctx, x, d, 2 * lanes);
    } else {
        x = ggml_get_rows(ctx, c.codec_embd[step - 1], code);
    }
    // small_to_mtp_projection; absent (identity) when the predictor is as wide as the talker.
    if (c.mtp_proj) x = linear(ctx, x, c.mtp_proj, c.mtp_proj_b);
    x = named(x, "pred.inp_embd");
    const int64_t n_all = x->ne[1], n = n_all / lanes;
    if (!pos) pos = input(ggml_new_tensor_1d(ctx, GGML_TYPE_I32, n_all), kPredPos);
    const int n_past = step == 0 ? 0 : step + 1;
    KvWindow kv{&cache.k, &cache.v, n_past, n_past + n, lanes, lane_stride, cache.fused()};
    StackOptions o;
    o.prefix = "pred";
    // A step after the prefill writes its key and value with set_rows and attends the lane's whole
    // window under a mask, as the talker's step does (predictor_rows): the same shapes every step,
    // and the form checked on CUDA, where the strided single-position writes were not.
    KvStepGraph rows;
    if (step > 0 && !cache.fused()) {
        const int64_t window = lanes > 1 ? lane_stride : cache.n_ctx();
        rows = kv_step_graph(ctx, c.tfm.hp, lanes, window, rows_prefix);
        kv.n_past = 0;
        kv.n_kv = window;
        kv.rows = &rows.rows;
        o.mask = rows.mask;
    }
    o.kv = &kv;
    x = transformer_stack(ctx, gf, x, pos, c.tfm, o);
    // each lane's last position
    x = ggml_view_2d(ctx, x, x->ne[0], lanes, n * x->nb[1], (n - 1) * x->nb[1]);
    if (n > 1 && lanes > 1) x = ggml_cont(ctx, x);
    x = named(rms_norm(ctx, x, c.output_norm, c.tfm.hp.eps), "pred.hidden");
    return named(matmul(ctx, c.lm_head[step], x), "%s", kPredLogits);
}

// The custom op of build_predictor_frame: one thread runs select_token over each lane's logits.
void sample_op(ggml_tensor * dst, int ith, int, void * userdata) {
    if (ith != 0) return;
    auto * s = static_cast<FrameSampler *>(userdata);
    const ggml_tensor * logits = dst->src[0];
    const int64_t V = logits->ne[0];
    for (int64_t b = 0; b < dst->ne[0]; ++b) {
        const auto * v = reinterpret_cast<const float *>(static_cast<const char *>(logits->data) + b * logits->nb[1]);
        int32_t code = 0;
        try {
            s->logits.assign(v, v + V);
            if (!s->error) code = select_token(s->logits, *s->params[b], *s->rng[b]);
        } catch (...) {
            s->error = std::current_exception();
        }
        static_cast<int32_t *>(dst->data)[b] = code;
    }
}

}  // namespace

KvStepInputs predictor_rows(const CodePredictor & c, const KvCache & cache, int step, int64_t lanes,
                            int64_t lane_stride) {
    const int64_t window = lanes > 1 ? lane_stride : cache.n_ctx();
    return kv_step_inputs(c.tfm.hp, cache.n_ctx(), lanes > 1 ? lane_stride : cache.n_ctx(), window,
                          std::vector<int32_t>(static_cast<size_t>(lanes), step + 1));
}

ggml_tensor * build_predictor_step(ggml_context * ctx, ggml_cgraph * gf, const CodePredictor & c, const Talker & t,
                                   const KvCache & cache, int step) {
    return build_predictor_step_batch(ctx, gf, c, t, cache, step, 1, 0);
}

ggml_tensor * build_predictor_step_batch(ggml_context * ctx, ggml_cgraph * gf, const CodePredictor & c,
                                         const Talker & t, const KvCache & cache, int step, int64_t lanes,
                                         int64_t lane_stride) {
    ggml_tensor * code = input(ggml_new_tensor_1d(ctx, GGML_TYPE_I32, lanes), kPredCode);
    ggml_tensor * hidden =
        step == 0 ? input(ggml_new_tensor_2d(ctx, GGML_TYPE_F32, t.n_embd(), lanes), kPredHidden) : nullptr;
    return predictor_logits(ctx, gf, c, t, cache, step, lanes, lane_stride, code, hidden, nullptr, "pred");
}

bool device_samples(const SamplingParams & p) { return !p.do_sample || p.top_p >= 1.0f; }

ggml_tensor * sample_on_device(ggml_context * ctx, ggml_tensor * logits, const SamplingParams & p, ggml_tensor * u) {
    const int64_t V = logits->ne[0], lanes = ggml_nelements(logits) / V;
    ggml_tensor * l = ggml_reshape_2d(ctx, logits, V, lanes);
    if (!p.do_sample) return ggml_argmax(ctx, l);
    if (!(p.temperature > 0.0f)) fail("temperature must be positive when sampling, got %g", p.temperature);
    if (!device_samples(p)) fail("top_p < 1 is sampled on the host");
    if (!u || ggml_nelements(u) != lanes) fail("sample_on_device: need one draw per lane");
    ggml_tensor * s = p.temperature != 1.0f ? ggml_scale(ctx, l, 1.0f / p.temperature) : l;
    if (p.top_k > 0 && p.top_k < V) {
        // each lane's k-th largest score; the tokens below it get a large negative bias, so their
        // probability is exactly 0 (a -inf bias times 0 would be NaN in the mask's product).
        // The k-th index is copied out of the sort's view first: get_rows reads its indices from
        // offset 0 on ggml-vulkan (which asserts that) and assumes it on other backends' kernels.
        ggml_tensor * top = ggml_argsort_top_k(ctx, s, p.top_k);  // [k, lanes]
        ggml_tensor * kth_id = ggml_cont(ctx, ggml_view_2d(ctx, top, 1, lanes, top->nb[1], (p.top_k - 1) * top->nb[0]));
        ggml_tensor * kth = ggml_get_rows(ctx, ggml_reshape_3d(ctx, s, 1, V, lanes), kth_id);  // [1, 1, lanes]
        kth = ggml_reshape_2d(ctx, kth, 1, lanes);
        ggml_tensor * below = ggml_step(ctx, ggml_neg(ctx, ggml_sub(ctx, s, kth)));  // 1 where s < kth
        s = ggml_add(ctx, s, ggml_scale(ctx, below, -1e30f));
    }
    ggml_tensor * cum = ggml_cumsum(ctx, ggml_soft_max(ctx, s));  // [V, lanes], the last is the total
    ggml_tensor * total = ggml_view_2d(ctx, cum, 1, lanes, cum->nb[1], (V - 1) * cum->nb[0]);
    ggml_tensor * target = ggml_mul(ctx, ggml_reshape_2d(ctx, u, 1, lanes), total);
    // the choice is the first token whose cumulative probability passes the target: the tokens
    // at or under it come before it (V minus those above); clamped for a target rounded to the total
    ggml_tensor * above = ggml_sum_rows(ctx, ggml_step(ctx, ggml_sub(ctx, cum, target)));
    ggml_tensor * at =
        ggml_clamp(ctx, ggml_scale_bias(ctx, above, -1.0f, static_cast<float>(V)), 0.0f, static_cast<float>(V - 1));
    return ggml_reshape_1d(ctx, ggml_cast(ctx, at, GGML_TYPE_I32), lanes);
}

ggml_tensor * build_predictor_frame(ggml_context * ctx, ggml_cgraph * gf, const CodePredictor & c, const Talker & t,
                                    const KvCache & cache, FrameSampler * sampler, FrameGraphIo & io,
                                    const SamplingParams * device, int64_t lanes, int64_t lane_stride) {
    io = FrameGraphIo{};
    const int steps = t.n_code_groups - 1;
    io.code0 = input(ggml_new_tensor_1d(ctx, GGML_TYPE_I32, lanes), kPredCode);
    io.hidden = input(ggml_new_tensor_2d(ctx, GGML_TYPE_F32, t.n_embd(), lanes), kPredHidden);
    if (device && device->do_sample) {
        // step-major: step j's draws are lanes values from j * lanes
        io.uniform = input(ggml_new_tensor_1d(ctx, GGML_TYPE_F32, steps * lanes), "pred.uniform");
    }
    ggml_tensor * code = io.code0;
    for (int step = 0; step < steps; ++step) {
        ggml_tensor * pos = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, (step == 0 ? 2 : 1) * lanes);
        io.pos.push_back(input(pos, format("%s.%d", kPredPos, step).c_str()));
        ggml_tensor * logits = predictor_logits(ctx, gf, c, t, cache, step, lanes, lane_stride, code, io.hidden, pos,
                                                format("pred.%d", step).c_str());
        if (device) {
            ggml_tensor * u =
                io.uniform ? ggml_view_1d(ctx, io.uniform, lanes, step * lanes * io.uniform->nb[0]) : nullptr;
            code = sample_on_device(ctx, logits, *device, u);
        } else {
            code = ggml_custom_4d(ctx, GGML_TYPE_I32, lanes, 1, 1, 1, &logits, 1, sample_op, 1, sampler);
        }
        code = named(code, "pred.code.%d", step + 1);
        ggml_set_output(code);
        ggml_build_forward_expand(gf, code);
        io.codes.push_back(code);
    }
    return code;
}
}  // namespace qtts
