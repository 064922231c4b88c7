#include "nets/code_predictor.h"

#include "runtime/graph.h"

namespace qtts {

ggml_tensor * build_predictor_step(ggml_context * ctx, ggml_cgraph * gf, const Model & m, const KvCache & cache,
                                   int step) {
    const CodePredictorWeights & c = m.code_pred;
    ggml_tensor * code = named(ggml_new_tensor_1d(ctx, GGML_TYPE_I32, 1), "%s", kPredCode);
    ggml_set_input(code);
    ggml_tensor * x;
    if (step == 0) {
        ggml_tensor * h = named(ggml_new_tensor_2d(ctx, GGML_TYPE_F32, m.talker.hp.n_embd, 1), "%s", kPredHidden);
        ggml_set_input(h);
        x = ggml_concat(ctx, h, ggml_get_rows(ctx, m.talker.codec_embd, code), 1);
    } else {
        x = ggml_get_rows(ctx, c.codec_embd[step - 1], code);
    }
    // small_to_mtp_projection; absent (identity) when the predictor is as wide as the talker.
    if (c.mtp_proj) x = linear(ctx, x, c.mtp_proj, c.mtp_proj_b);
    x = named(x, "pred.inp_embd");
    const int64_t n = x->ne[1];
    ggml_tensor * pos = named(ggml_new_tensor_1d(ctx, GGML_TYPE_I32, n), "%s", kPredPos);
    ggml_set_input(pos);
    const int n_past = step == 0 ? 0 : step + 1;
    x = decoder_stack(ctx, gf, x, pos, c.hp, c.layers, cache, n_past, "pred");
    x = ggml_view_2d(ctx, x, x->ne[0], 1, x->nb[1], (n - 1) * x->nb[1]);
    x = named(rms_norm(ctx, x, c.output_norm, c.hp.eps), "pred.hidden");
    return named(ggml_mul_mat(ctx, c.lm_head[step], x), "%s", kPredLogits);
}

}  // namespace qtts
