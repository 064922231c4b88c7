// The file-level metadata of a model (special ids, generation defaults, language and speaker
// tables) and the checks that tie the networks' hyper-parameters together.
#pragma once

#include "runtime/gguf_file.h"
#include "runtime/model.h"

namespace qtts {

// Special ids, generation defaults, languages and speakers, each range-checked on its own.
void read_metadata(const GgufFile & f, Model & m);

// A key whose value must equal another key's (sizes and rates shared between networks).
void require_same(const GgufFile & f, const char * key, int value, const char * other, int want);

// After every network was read: ids inside their vocabularies, rates and sizes that agree
// between networks, a tokenizer that fits the text vocabulary.
void check_metadata(const GgufFile & f, const Model & m);

}  // namespace qtts
