#include "runtime/metadata.h"

#include <cstdint>
#include <string_view>
#include <unordered_map>

#include "runtime/error.h"
#include "runtime/names.h"

namespace qtts {

namespace {

constexpr int kMaxTopK = 1 << 22;
// The bounds qtts.generation puts on the same settings passed as arguments (SCALE_RANGE,
// MAX_NEW_TOKENS), so that a file's defaults never fail there.
constexpr float kMinScale = 1e-6f;
constexpr int kMaxNewTokenLimit = 32768;
constexpr int32_t kTokenUnused = 5;  // gguf's token type for an empty slot

// A count checked later: an id against its vocabulary once the networks are read, a size shared
// with a network read before against that network's (its owner range-checks it when read).
int unchecked(const GgufFile & f, const char * key) { return f.count(key, 0, INT32_MAX); }

// A key whose value must equal another key's (sizes and rates shared between networks).
void require_same(const GgufFile & f, const char * key, int value, const char * other, int want) {
    if (value != want) f.key_error(key, format("= %d differs from '%s' = %d", value, other, want));
}

void in_vocab(const GgufFile & f, const char * key, int value, int vocab, const char * table) {
    if (value < 0 || value >= vocab) {
        f.key_error(key, format("= %d is outside the %s vocabulary [0, %d)", value, table, vocab));
    }
}

// The tokenizer tables become the ids of the text embedding: each must name a row of it.
void check_tokenizer(const GgufFile & f, int text_vocab) {
    if (!f.has(kv::TOKENIZER_TOKENS)) return;
    const std::vector<std::string> tokens = f.str_array(kv::TOKENIZER_TOKENS);
    if (tokens.empty() || tokens.size() > static_cast<size_t>(text_vocab)) {
        f.key_error(kv::TOKENIZER_TOKENS,
                    format("has %zu tokens, expected 1 to the text vocabulary size %d", tokens.size(), text_vocab));
    }
    std::vector<int32_t> types(tokens.size(), 1);
    if (f.has(kv::TOKENIZER_TOKEN_TYPE)) {
        types = f.i32_array(kv::TOKENIZER_TOKEN_TYPE);
        if (types.size() != tokens.size()) {
            f.key_error(kv::TOKENIZER_TOKEN_TYPE, format("differs in length from '%s'", kv::TOKENIZER_TOKENS));
        }
    }
    // one id per token string (unused slots aside), or the tokenizer could not map text back to ids
    std::unordered_map<std::string_view, size_t> seen;
    for (size_t i = 0; i < tokens.size(); ++i) {
        if (types[i] == kTokenUnused) continue;
        auto [it, fresh] = seen.emplace(tokens[i], i);
        if (!fresh) f.key_error(kv::TOKENIZER_TOKENS, format("holds token %zu twice (also at %zu)", i, it->second));
    }
    if (f.has(kv::TOKENIZER_MERGES)) {
        const std::vector<std::string> merges = f.str_array(kv::TOKENIZER_MERGES);
        for (size_t i = 0; i < merges.size(); ++i) {
            const size_t sp = merges[i].find(' ');
            if (sp == 0 || sp == std::string::npos || sp + 1 == merges[i].size() ||
                merges[i].find(' ', sp + 1) != std::string::npos) {
                f.key_error(kv::TOKENIZER_MERGES, format("element %zu is not of the form 'a b'", i));
            }
        }
    }
}

}  // namespace

void check_vocoder_keys(const GgufFile & f, const NetSizes & n) {
    // generated frames go to the vocoder: one code per group, each from the predictor's vocabulary
    const int groups = unchecked(f, kv::DEC_NUM_QUANTIZERS), codebook = unchecked(f, kv::DEC_CODEBOOK_SIZE);
    require_same(f, kv::DEC_NUM_QUANTIZERS, groups, kv::TALKER_NUM_CODE_GROUPS, n.n_code_groups);
    require_same(f, kv::DEC_CODEBOOK_SIZE, codebook, kv::CODE_PRED_VOCAB_SIZE, n.predictor_vocab);
    if (codebook > n.codec_vocab) {
        f.key_error(kv::DEC_CODEBOOK_SIZE,
                    format("= %d exceeds '%s' = %d", codebook, kv::TALKER_CODEC_VOCAB_SIZE, n.codec_vocab));
    }
}

void check_encoder_keys(const GgufFile & f, const NetSizes & n) {
    // encoded reference frames go back into the talker and the decoder as generated ones do
    require_same(f, kv::ENC_NUM_QUANTIZERS, unchecked(f, kv::ENC_NUM_QUANTIZERS), kv::DEC_NUM_QUANTIZERS,
                 n.dec_quantizers);
    require_same(f, kv::ENC_CODEBOOK_SIZE, unchecked(f, kv::ENC_CODEBOOK_SIZE), kv::DEC_CODEBOOK_SIZE,
                 n.dec_codebook_size);
    require_same(f, kv::ENC_SAMPLE_RATE, unchecked(f, kv::ENC_SAMPLE_RATE), kv::DEC_SAMPLE_RATE, n.dec_sample_rate);
    require_same(f, kv::ENC_HOP_LENGTH, unchecked(f, kv::ENC_HOP_LENGTH), kv::DEC_HOP_LENGTH, n.dec_hop_length);
}

void read_metadata(const GgufFile & f, ModelMetadata & m) {
    auto id = [&](const char * key) { return unchecked(f, key); };
    m.text_ids = {id(kv::TEXT_IM_START_ID), id(kv::TEXT_IM_END_ID), id(kv::TEXT_PAD_ID), id(kv::TEXT_BOS_ID),
                  id(kv::TEXT_EOS_ID)};
    m.codec_ids = {id(kv::CODEC_PAD_ID),      id(kv::CODEC_BOS_ID),     id(kv::CODEC_EOS_ID),
                   id(kv::CODEC_THINK_ID),    id(kv::CODEC_NOTHINK_ID), id(kv::CODEC_THINK_BOS_ID),
                   id(kv::CODEC_THINK_EOS_ID)};
    GenerationDefaults & g = m.gen;
    g.talker.do_sample = f.boolean(kv::GEN_DO_SAMPLE);
    g.talker.temperature = f.real(kv::GEN_TEMPERATURE, kMinScale, 100.0f, /*closed=*/true);
    g.talker.top_k = f.count(kv::GEN_TOP_K, 0, kMaxTopK);
    g.talker.top_p = f.real(kv::GEN_TOP_P, 1e-6f, 1.0f, /*closed=*/true);
    g.repetition_penalty = f.real(kv::GEN_REPETITION_PENALTY, kMinScale, 100.0f, /*closed=*/true);
    g.subtalker.do_sample = f.boolean(kv::GEN_SUB_DO_SAMPLE);
    g.subtalker.temperature = f.real(kv::GEN_SUB_TEMPERATURE, kMinScale, 100.0f, /*closed=*/true);
    g.subtalker.top_k = f.count(kv::GEN_SUB_TOP_K, 0, kMaxTopK);
    g.subtalker.top_p = f.real(kv::GEN_SUB_TOP_P, 1e-6f, 1.0f, /*closed=*/true);
    g.max_new_tokens = f.count(kv::GEN_MAX_NEW_TOKENS, 2, kMaxNewTokenLimit);

    const std::vector<std::string> lang_names = f.str_array(kv::LANGUAGE_NAMES);
    const std::vector<int32_t> lang_ids = f.i32_array(kv::LANGUAGE_IDS);
    if (lang_names.size() != lang_ids.size()) {
        f.key_error(kv::LANGUAGE_IDS,
                    format("has %zu elements, '%s' %zu", lang_ids.size(), kv::LANGUAGE_NAMES, lang_names.size()));
    }
    for (size_t i = 0; i < lang_names.size(); ++i) m.languages[lang_names[i]] = lang_ids[i];
    if (f.has(kv::SPEAKER_NAMES)) {
        const std::vector<std::string> names = f.str_array(kv::SPEAKER_NAMES);
        const std::vector<std::string> dialects = f.str_array(kv::SPEAKER_DIALECTS);
        const std::vector<int32_t> ids = f.i32_array(kv::SPEAKER_IDS);
        if (names.size() != ids.size() || names.size() != dialects.size()) {
            f.key_error(kv::SPEAKER_IDS,
                        format("has %zu elements, '%s' %zu and '%s' %zu", ids.size(), kv::SPEAKER_NAMES, names.size(),
                               kv::SPEAKER_DIALECTS, dialects.size()));
        }
        for (size_t i = 0; i < names.size(); ++i) m.speakers.push_back({names[i], dialects[i], ids[i]});
    }
}

void check_metadata(const GgufFile & f, const ModelMetadata & m, const NetSizes & n) {
    const int tv = n.text_vocab, cv = n.codec_vocab;
    // special ids index embedding tables, where ggml's get_rows asserts
    in_vocab(f, kv::TEXT_IM_START_ID, m.text_ids.im_start, tv, "text");
    in_vocab(f, kv::TEXT_IM_END_ID, m.text_ids.im_end, tv, "text");
    in_vocab(f, kv::TEXT_PAD_ID, m.text_ids.pad, tv, "text");
    in_vocab(f, kv::TEXT_BOS_ID, m.text_ids.bos, tv, "text");
    in_vocab(f, kv::TEXT_EOS_ID, m.text_ids.eos, tv, "text");
    in_vocab(f, kv::CODEC_PAD_ID, m.codec_ids.pad, cv, "codec");
    in_vocab(f, kv::CODEC_BOS_ID, m.codec_ids.bos, cv, "codec");
    in_vocab(f, kv::CODEC_EOS_ID, m.codec_ids.eos, cv, "codec");
    in_vocab(f, kv::CODEC_THINK_ID, m.codec_ids.think, cv, "codec");
    in_vocab(f, kv::CODEC_NOTHINK_ID, m.codec_ids.nothink, cv, "codec");
    in_vocab(f, kv::CODEC_THINK_BOS_ID, m.codec_ids.think_bos, cv, "codec");
    in_vocab(f, kv::CODEC_THINK_EOS_ID, m.codec_ids.think_eos, cv, "codec");
    for (const auto & [name, lid] : m.languages) in_vocab(f, kv::LANGUAGE_IDS, lid, cv, "codec");
    for (const Speaker & s : m.speakers) in_vocab(f, kv::SPEAKER_IDS, s.id, cv, "codec");

    // the reference clip is resampled once, to the rate the codecs share
    if (n.spk_sample_rate) {
        require_same(f, kv::SPK_SAMPLE_RATE, n.spk_sample_rate, kv::DEC_SAMPLE_RATE, n.dec_sample_rate);
    }
    check_tokenizer(f, tv);
}

}  // namespace qtts
