// The file-level metadata of a model (special ids, generation defaults, language and speaker
// tables) and the checks that tie the networks' hyper-parameters together. It knows no network:
// the loader hands it the sizes the networks were read with (NetSizes).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "runtime/generate.h"
#include "runtime/gguf_file.h"

namespace qtts {

struct TextIds {
    int im_start = 0, im_end = 0, pad = 0, bos = 0, eos = 0;
};

struct CodecIds {
    int pad = 0, bos = 0, eos = 0, think = 0, nothink = 0, think_bos = 0, think_eos = 0;
};

struct Speaker {
    std::string name, dialect;
    int id = 0;
};

// What the file says about the model as a whole (runtime/model.h holds it).
struct ModelMetadata {
    TextIds text_ids;
    CodecIds codec_ids;
    GenerationDefaults gen;
    std::map<std::string, int> languages;
    std::vector<Speaker> speakers;
};

// The sizes and rates each network was read with that another network must agree with.
struct NetSizes {
    int text_vocab = 0, codec_vocab = 0, n_code_groups = 0;   // talker
    int predictor_vocab = 0;                                  // code predictor
    int dec_quantizers = 0, dec_codebook_size = 0, dec_sample_rate = 0, dec_hop_length = 0;  // vocoder
    int enc_quantizers = 0, enc_codebook_size = 0, enc_sample_rate = 0, enc_hop_length = 0;  // codec encoder
    int spk_sample_rate = 0;                                  // speaker encoder; 0: the model has none
};

// Special ids, generation defaults, languages and speakers, each range-checked on its own.
void read_metadata(const GgufFile & f, ModelMetadata & m);

// The checks between networks, in load order (runtime/model.cpp). A network's tensors are
// declared with its own sizes, so before the vocoder and the codec encoder are read, the keys
// they share with the networks read before them must agree (a mismatch then names the key, not
// a tensor); each network range-checks its keys itself afterwards.
// Before the vocoder: its quantizers and codebook against the talker and the code predictor.
void check_vocoder_keys(const GgufFile & f, const NetSizes & n);
// Before the codec encoder: its quantizers, codebook, rate and hop against the vocoder's.
void check_encoder_keys(const GgufFile & f, const NetSizes & n);
// After every network was read: ids inside their vocabularies, the speaker encoder's rate, a
// tokenizer that fits the text vocabulary.
void check_metadata(const GgufFile & f, const ModelMetadata & m, const NetSizes & n);

}  // namespace qtts
