#include "nets/talker.h"

#include "runtime/graph.h"

namespace qtts {

namespace {

ggml_tensor * input(ggml_tensor * t, const char * name) {
    ggml_set_input(t);
    return named(t, "%s", name);
}

// Decoder stack, then only the last position goes through the final norm and the head.
ggml_tensor * talker_body(ggml_context * ctx, ggml_cgraph * gf, const TalkerWeights & t, const KvCache & cache,
                          ggml_tensor * x, int n_past) {
    const int64_t n = x->ne[1];
    ggml_tensor * pos = input(ggml_new_tensor_1d(ctx, GGML_TYPE_I32, n), kTalkerPos);
    x = decoder_stack(ctx, gf, x, pos, t.hp, t.layers, cache, n_past, "talker");
    x = ggml_view_2d(ctx, x, x->ne[0], 1, x->nb[1], (n - 1) * x->nb[1]);
    ggml_tensor * h = named(rms_norm(ctx, x, t.output_norm, t.hp.eps), "%s", kTalkerHidden);
    ggml_set_output(h);
    return named(ggml_mul_mat(ctx, t.codec_head, h), "%s", kTalkerLogits);
}

}  // namespace

ggml_tensor * build_talker_prefill(ggml_context * ctx, ggml_cgraph * gf, const TalkerWeights & t,
                                   const KvCache & cache, int n_past, int n) {
    ggml_tensor * x = input(ggml_new_tensor_2d(ctx, GGML_TYPE_F32, t.hp.n_embd, n), kTalkerEmbd);
    return talker_body(ctx, gf, t, cache, x, n_past);
}

ggml_tensor * build_talker_step(ggml_context * ctx, ggml_cgraph * gf, const Model & m, const KvCache & cache,
                                int n_past) {
    const TalkerWeights & t = m.talker;
    const int groups = t.n_code_groups;
    ggml_tensor * codes = input(ggml_new_tensor_1d(ctx, GGML_TYPE_I32, groups), kTalkerCodes);
    ggml_tensor * text = input(ggml_new_tensor_2d(ctx, GGML_TYPE_F32, t.hp.n_embd, 1), kTalkerText);
    auto code = [&](int g) { return ggml_view_1d(ctx, codes, 1, g * codes->nb[0]); };
    ggml_tensor * x = ggml_get_rows(ctx, t.codec_embd, code(0));
    for (int g = 1; g < groups; ++g) x = ggml_add(ctx, x, ggml_get_rows(ctx, m.code_pred.codec_embd[g - 1], code(g)));
    x = named(ggml_add(ctx, x, text), "talker.step_embd");
    return talker_body(ctx, gf, t, cache, x, n_past);
}

}  // namespace qtts
