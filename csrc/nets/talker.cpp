#include "nets/talker.h"

#include "nets/code_predictor.h"
#include "runtime/error.h"
#include "runtime/gguf_file.h"
#include "runtime/loader.h"
#include "runtime/names.h"

namespace qtts {

void load_talker(GgufFile & f, Talker & t) {
    t.tfm = load_transformer(f, kv::P_TALKER, tn::TALKER, /*has_context=*/true, LayerStyle::QWEN3);
    const TransformerHParams & hp = t.tfm.hp;
    t.text_vocab = f.count(kv::TALKER_TEXT_VOCAB_SIZE, 1, kMaxVocab);
    t.text_embd = f.count(kv::TALKER_TEXT_EMBEDDING_LENGTH, 1, kMaxWidth);
    t.codec_vocab = f.count(kv::TALKER_CODEC_VOCAB_SIZE, 1, kMaxVocab);
    t.n_code_groups = f.count(kv::TALKER_NUM_CODE_GROUPS, 2, kMaxGroups);
    // the sections split the rotated pairs among time, height and width: together all of them
    t.mrope_section = f.counts(kv::TALKER_MROPE_SECTION, 1, 4, 0, hp.head_dim / 2);
    int pairs = 0;
    for (int x : t.mrope_section) pairs += x;
    if (pairs != hp.head_dim / 2) {
        f.key_error(kv::TALKER_MROPE_SECTION,
                    format("sums to %d, expected half the head dimension (%d)", pairs, hp.head_dim / 2));
    }
    const int64_t d = hp.n_embd, te = t.text_embd;
    t.text_tok = f.tensor(tn::TALKER_TEXT_EMBD, {te, t.text_vocab}, WeightKind::TABLE);
    t.fc1 = f.tensor(tn::TALKER_TEXT_FC1, {te, te}, WeightKind::MATMUL);
    t.fc1_b = f.tensor(tn::TALKER_TEXT_FC1_B, {te}, WeightKind::F32);
    t.fc2 = f.tensor(tn::TALKER_TEXT_FC2, {te, d}, WeightKind::MATMUL);
    t.fc2_b = f.tensor(tn::TALKER_TEXT_FC2_B, {d}, WeightKind::F32);
    t.codec_embd = f.tensor(tn::TALKER_CODEC_EMBD, {d, t.codec_vocab}, WeightKind::TABLE);
    t.output_norm = f.tensor(tn::TALKER_OUTPUT_NORM, {d}, WeightKind::F32);
    t.codec_head = f.tensor(tn::TALKER_CODEC_HEAD, {d, t.codec_vocab}, WeightKind::MATMUL);
}

namespace {

// The final norm and the codec head over the positions given.
ggml_tensor * talker_head(ggml_context * ctx, const Talker & t, ggml_tensor * x) {
    ggml_tensor * h = named(rms_norm(ctx, x, t.output_norm, t.tfm.hp.eps), "%s", kTalkerHidden);
    ggml_set_output(h);
    return named(matmul(ctx, t.codec_head, h), "%s", kTalkerLogits);
}

// The transformer, then only the last position goes through the final norm and the head.
ggml_tensor * talker_body(ggml_context * ctx, ggml_cgraph * gf, const Talker & t, const KvCache & cache,
                          ggml_tensor * x, const KvWindow & kv) {
    const int64_t n = x->ne[1];
    ggml_tensor * pos = input(ggml_new_tensor_1d(ctx, GGML_TYPE_I32, n), kTalkerPos);
    StackOptions o;
    o.prefix = "talker";
    o.kv = &kv;
    x = transformer_stack(ctx, gf, x, pos, t.tfm, o);
    return talker_head(ctx, t, ggml_view_2d(ctx, x, x->ne[0], 1, x->nb[1], (n - 1) * x->nb[1]));
}

// C(cb0) + sum_g CPE_{g-1}(cb_g) + text for n frames: codes [n, groups] group-major, text [D, n].
ggml_tensor * step_embedding(ggml_context * ctx, const Talker & t, const CodePredictor & cp, int64_t n) {
    const int groups = t.n_code_groups;
    ggml_tensor * codes = input(ggml_new_tensor_2d(ctx, GGML_TYPE_I32, n, groups), kTalkerCodes);
    ggml_tensor * text = input(ggml_new_tensor_2d(ctx, GGML_TYPE_F32, t.n_embd(), n), kTalkerText);
    auto code = [&](int g) { return index_row(ctx, codes, g); };
    ggml_tensor * x = ggml_get_rows(ctx, t.codec_embd, code(0));
    for (int g = 1; g < groups; ++g) x = ggml_add(ctx, x, ggml_get_rows(ctx, cp.codec_embd[g - 1], code(g)));
    return named(ggml_add(ctx, x, text), "talker.step_embd");
}

}  // namespace

ggml_tensor * build_talker_prefill(ggml_context * ctx, ggml_cgraph * gf, const Talker & t, const KvCache & cache,
                                   int n_past, int n, int64_t first) {
    ggml_tensor * x = input(ggml_new_tensor_2d(ctx, GGML_TYPE_F32, t.n_embd(), n), kTalkerEmbd);
    KvWindow kv{&cache.k, &cache.v, n_past, n_past + n, 1, 0, cache.fused()};
    kv.first = first;
    return talker_body(ctx, gf, t, cache, x, kv);
}

ggml_tensor * build_talker_step(ggml_context * ctx, ggml_cgraph * gf, const Talker & t, const CodePredictor & cp,
                                const KvCache & cache) {
    if (!cache.fused()) fail("talker: only a fused cache takes its position when the graph runs");
    // the whole fused cache: the op reads the position from kTalkerPos
    const KvWindow kv{&cache.k, &cache.v, 0, cache.n_ctx(), 1, 0, true};
    return talker_body(ctx, gf, t, cache, step_embedding(ctx, t, cp, 1), kv);
}

ggml_tensor * build_talker_step_lanes(ggml_context * ctx, ggml_cgraph * gf, const Talker & t, const CodePredictor & cp,
                                      const KvCache & cache, int64_t lanes, int64_t lane_len, int64_t window) {
    ggml_tensor * x = step_embedding(ctx, t, cp, lanes);
    ggml_tensor * pos = input(ggml_new_tensor_1d(ctx, GGML_TYPE_I32, lanes), kTalkerPos);
    StackOptions o;
    o.prefix = "talker";
    KvWindow kv{&cache.k, &cache.v, 0, lane_len, lanes, lane_len, cache.fused()};
    KvStepGraph in;
    if (!cache.fused()) {
        in = kv_step_graph(ctx, t.tfm.hp, lanes, window, o.prefix);
        kv.n_kv = window;
        kv.rows = &in.rows;
        o.mask = in.mask;
    }
    o.kv = &kv;
    return talker_head(ctx, t, transformer_stack(ctx, gf, x, pos, t.tfm, o));
}

ggml_tensor * build_text_embed(ggml_context * ctx, const Talker & t, int64_t n) {
    ggml_tensor * ids = input(ggml_new_tensor_1d(ctx, GGML_TYPE_I32, n), kEmbedIds);
    ggml_tensor * x = named(ggml_get_rows(ctx, t.text_tok, ids), "text_tok_embd");
    x = named(ggml_silu(ctx, linear(ctx, x, t.fc1, t.fc1_b)), "text_proj_hidden");
    return named(linear(ctx, x, t.fc2, t.fc2_b), "text_proj");
}

ggml_tensor * build_codec_embed(ggml_context * ctx, const Talker & t, int64_t n) {
    ggml_tensor * ids = input(ggml_new_tensor_1d(ctx, GGML_TYPE_I32, n), kEmbedIds);
    return named(ggml_get_rows(ctx, t.codec_embd, ids), "codec_embd");
}

ggml_tensor * build_frame_embed(ggml_context * ctx, const Talker & t, const CodePredictor & cp, int64_t n) {
    const int64_t groups = t.n_code_groups;
    ggml_tensor * codes = input(ggml_new_tensor_2d(ctx, GGML_TYPE_I32, n, groups), kFrameCodes);
    auto rows = [&](ggml_tensor * table, int64_t g) { return ggml_get_rows(ctx, table, index_row(ctx, codes, g)); };
    ggml_tensor * x = rows(t.codec_embd, 0);
    for (int64_t g = 1; g < groups; ++g) x = ggml_add(ctx, x, rows(cp.codec_embd[g - 1], g));
    return named(x, "frame_embd");
}

}  // namespace qtts
