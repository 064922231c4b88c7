// The aligner's decoder (docs/aligner.md, "The model"): the token table's rows, the Qwen3 layers
// of runtime/transformer over a KV cache filled chunk by chunk (as the talker's prefill), and the
// final norm and timestamp head at the <timestamp> slots only.
#include <algorithm>
#include <string>

#include "nets/aligner.h"
#include "runtime/error.h"
#include "runtime/gguf_file.h"
#include "runtime/graph.h"
#include "runtime/loader.h"
#include "runtime/names.h"

namespace qtts {

void load_aligner_decoder(GgufFile & f, int out_dim, AlignerDecoder & d) {
    d.tfm = load_transformer(f, kv::P_ALIGNER_DEC, tn::ADEC, /*has_context=*/true, LayerStyle::QWEN3);
    const int64_t w = d.tfm.hp.n_embd;
    if (w != out_dim) {
        f.key_error(
            format(kv::T_EMBEDDING_LENGTH, kv::P_ALIGNER_DEC).c_str(),
            format("= %lld differs from the audio encoder's output width %d", static_cast<long long>(w), out_dim));
    }
    d.vocab = f.count(kv::ALIGNER_VOCAB_SIZE, 1, kMaxVocab);
    d.n_classes = f.count(kv::ALIGNER_CLASS_COUNT, 1, 1 << 20);
    d.token_embd = f.tensor(tn::ADEC_TOKEN_EMBD, {w, d.vocab}, WeightKind::TABLE);
    d.output_norm = f.tensor(tn::ADEC_OUTPUT_NORM, {w}, WeightKind::F32);
    d.head = f.tensor(tn::ADEC_TIMESTAMP_HEAD, {w, d.n_classes}, WeightKind::MATMUL);
}

namespace {

constexpr const char * kIds = "adec.ids";      // I32 [n]
constexpr const char * kEmbd = "adec.embd";    // F32 [n_embd, n]
constexpr const char * kPos = "adec.pos";      // I32 [n]
constexpr const char * kSlots = "adec.slots";  // I32 [slots]: rows of the chunk

// One chunk of n positions at n_past..: the layers over the cache, then the final norm and the
// head over the chunk's rows `slots` (one row, discarded, where it has none: a graph needs an
// output).
ggml_tensor * build_chunk(ggml_context * ctx, ggml_cgraph * gf, const AlignerDecoder & d, const KvCache & cache,
                          int64_t n_past, int64_t n, int64_t n_slots) {
    ggml_tensor * x = input(ggml_new_tensor_2d(ctx, GGML_TYPE_F32, d.tfm.hp.n_embd, n), kEmbd);
    ggml_tensor * pos = input(ggml_new_tensor_1d(ctx, GGML_TYPE_I32, n), kPos);
    const KvWindow kv{&cache.k, &cache.v, n_past, n_past + n, 1, 0, cache.fused()};
    StackOptions o;
    o.prefix = "adec";
    o.kv = &kv;
    x = transformer_stack(ctx, gf, x, pos, d.tfm, o);
    ggml_tensor * rows = input(ggml_new_tensor_1d(ctx, GGML_TYPE_I32, std::max<int64_t>(n_slots, 1)), kSlots);
    ggml_tensor * h = named(rms_norm(ctx, ggml_get_rows(ctx, x, rows), d.output_norm, d.tfm.hp.eps), "adec.hidden");
    return named(matmul(ctx, d.head, h), "adec.logits");
}

}  // namespace

std::vector<float> aligner_embed(const AlignerDecoder & d, const CodecRunner & r, const std::vector<int32_t> & ids) {
    if (ids.empty()) fail("aligner: no token ids");
    for (int32_t id : ids) {
        if (id < 0 || id >= d.vocab) fail("aligner: token id %d is outside the vocabulary [0, %d)", id, d.vocab);
    }
    const int64_t n = static_cast<int64_t>(ids.size());
    ggml_cgraph * gf = r.run(
        [&](ggml_context * ctx, ggml_cgraph *) {
            ggml_tensor * x = input(ggml_new_tensor_1d(ctx, GGML_TYPE_I32, n), kIds);
            return named(ggml_get_rows(ctx, d.token_embd, x), "adec.token_rows");
        },
        [&](ggml_cgraph * g) { set_input(g, kIds, ids); });
    return read_output(gf);
}

std::vector<float> aligner_logits(const AlignerDecoder & d, const CodecRunner & r, KvCache & cache, bool fused,
                                  const std::vector<float> & embd, int64_t n, const std::vector<int32_t> & slots,
                                  int chunk) {
    const TransformerHParams & hp = d.tfm.hp;
    const size_t width = static_cast<size_t>(hp.n_embd);
    if (n < 1 || embd.size() != static_cast<size_t>(n) * width) {
        fail("aligner: expected [%lld, %d] input embeddings, got %zu values", static_cast<long long>(n), hp.n_embd,
             embd.size());
    }
    if (n > hp.n_ctx) {
        fail("aligner: the prompt has %lld positions, more than the decoder's context of %d (shorter audio or text)",
             static_cast<long long>(n), hp.n_ctx);
    }
    if (chunk < 1) fail("aligner: chunk must be at least 1, got %d", chunk);
    for (size_t i = 0; i < slots.size(); ++i) {
        if (slots[i] < 0 || slots[i] >= n || (i > 0 && slots[i] <= slots[i - 1])) {
            fail("aligner: slot positions must ascend within [0, %lld)", static_cast<long long>(n));
        }
    }
    if (cache.n_ctx() < n || cache.fused() != fused) cache.reserve(r.state_backend, hp, static_cast<int>(n), fused);
    std::vector<float> out;
    out.reserve(slots.size() * static_cast<size_t>(d.n_classes));
    size_t next = 0;  // the first slot not done yet
    for (int64_t n_past = 0; n_past < n; n_past += chunk) {
        const int64_t c = std::min<int64_t>(chunk, n - n_past);
        std::vector<int32_t> rows;
        while (next < slots.size() && slots[next] < n_past + c) rows.push_back(slots[next++] - n_past);
        const int64_t n_rows = static_cast<int64_t>(rows.size());
        std::vector<int32_t> pos(static_cast<size_t>(c));
        for (int64_t i = 0; i < c; ++i) pos[i] = static_cast<int32_t>(n_past + i);
        if (rows.empty()) rows.push_back(static_cast<int32_t>(c - 1));
        ggml_cgraph * gf =
            r.run([&](ggml_context * ctx, ggml_cgraph * g) { return build_chunk(ctx, g, d, cache, n_past, c, n_rows); },
                  [&](ggml_cgraph * g) {
                      set_input(g, kEmbd, embd.data() + n_past * width, c * width * sizeof(float));
                      set_input(g, kPos, pos);
                      set_input(g, kSlots, rows);
                  });
        if (n_rows > 0) {
            const std::vector<float> logits = read_output(gf);
            out.insert(out.end(), logits.begin(), logits.end());
        }
    }
    return out;
}

}  // namespace qtts
