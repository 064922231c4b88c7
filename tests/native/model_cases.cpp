// The tiny-model cases: the vocoder over fixed codes (Session::decode) and a few greedy frames of
// the talker and code predictor from a fixed prompt (Session::generate_begin/next), as
// qtts.load(path) would run them on the CPU with the native ops.
#include <memory>
#include <stdexcept>

#include "check.h"
#include "runtime/model.h"
#include "runtime/session.h"

namespace qtts::check {

namespace {

std::unique_ptr<Session> open_session(const Line & l, const std::string & dir) {
    auto model = std::make_shared<Model>(dir + "/" + l.at(3), "cpu", OpsChoice::native);
    return std::make_unique<Session>(model, std::stoi(l.at(2)));
}

// Rows of a float32 [n, d] array.
std::vector<float> rows(const Array & a, int & n) {
    if (a.descr != "<f4" || a.shape.size() != 2) throw std::runtime_error("expected a float32 matrix");
    n = static_cast<int>(a.shape[0]);
    return std::vector<float>(a.f32(), a.f32() + a.count());
}

}  // namespace

std::vector<float> run_decode(const Line & l, const std::string & dir) {  // id threads model codes
    const Array codes = read_npy(dir + "/" + l.at(4));
    if (codes.descr != "<i4" || codes.shape.size() != 2) throw std::runtime_error("codes must be int32 [n, q]");
    return open_session(l, dir)->decode(std::vector<int32_t>(codes.i32(), codes.i32() + codes.count()), codes.shape[0]);
}

std::vector<float> run_generate(const Line & l, const std::string & dir, std::vector<int64_t> & shape) {
    // id threads model prompt trailing frames: greedy on both networks, no repetition penalty,
    // EOS masked, so exactly `frames` frames
    int n_prompt = 0, n_trailing = 0;
    const std::vector<float> prompt = rows(read_npy(dir + "/" + l.at(4)), n_prompt);
    const std::vector<float> trailing = rows(read_npy(dir + "/" + l.at(5)), n_trailing);
    const int frames = std::stoi(l.at(6));
    GenerateParams p;
    p.repetition_penalty = 1.0f;
    p.max_new_tokens = p.min_new_tokens = frames + 1;
    std::unique_ptr<Session> s = open_session(l, dir);
    s->generate_begin(prompt, n_prompt, trailing, n_trailing, p);
    const GenerateResult r = s->generate_next(frames, [] { return false; });
    if (r.frames != frames) throw std::runtime_error("generation stopped early: " + r.stop_reason);
    shape = {r.frames, static_cast<int64_t>(r.codes.size()) / r.frames};
    return std::vector<float>(r.codes.begin(), r.codes.end());  // small ids: exact as floats
}

}  // namespace qtts::check
