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

ggml_tensor * build_predictor_step(ggml_context * ctx, ggml_cgraph * gf, const CodePredictor & c, const Talker & t,
                                   const KvCache & cache, int step) {
    ggml_tensor * code = input(ggml_new_tensor_1d(ctx, GGML_TYPE_I32, 1), kPredCode);
    ggml_tensor * x;
    if (step == 0) {
        ggml_tensor * h = input(ggml_new_tensor_2d(ctx, GGML_TYPE_F32, t.n_embd(), 1), kPredHidden);
        x = ggml_concat(ctx, h, ggml_get_rows(ctx, t.codec_embd, code), 1);
    } else {
        x = ggml_get_rows(ctx, c.codec_embd[step - 1], code);
    }
    // small_to_mtp_projection; absent (identity) when the predictor is as wide as the talker.
    if (c.mtp_proj) x = linear(ctx, x, c.mtp_proj, c.mtp_proj_b);
    x = named(x, "pred.inp_embd");
    const int64_t n = x->ne[1];
    ggml_tensor * pos = input(ggml_new_tensor_1d(ctx, GGML_TYPE_I32, n), kPredPos);
    const int n_past = step == 0 ? 0 : step + 1;
    const KvWindow kv{&cache.k, &cache.v, n_past, n_past + n};
    StackOptions o;
    o.prefix = "pred";
    o.kv = &kv;
    x = transformer_stack(ctx, gf, x, pos, c.tfm, o);
    x = ggml_view_2d(ctx, x, x->ne[0], 1, x->nb[1], (n - 1) * x->nb[1]);
    x = named(rms_norm(ctx, x, c.output_norm, c.tfm.hp.eps), "pred.hidden");
    return named(matmul(ctx, c.lm_head[step], x), "%s", kPredLogits);
}

}  // namespace qtts
