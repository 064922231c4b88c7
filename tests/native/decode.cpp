// The tiny-model decode: the vocoder over fixed codes through Session::decode, as
// qtts.load(path).decode would run it on the CPU with the native ops.
#include <memory>
#include <stdexcept>

#include "check.h"
#include "runtime/model.h"
#include "runtime/session.h"

namespace qtts::check {

std::vector<float> run_decode(const Line & l, const std::string & dir) {  // id threads model codes
    const Array codes = read_npy(dir + "/" + l.at(4));
    if (codes.descr != "<i4" || codes.shape.size() != 2) throw std::runtime_error("codes must be int32 [n, q]");
    auto model = std::make_shared<Model>(dir + "/" + l.at(3), "cpu", OpsChoice::native);
    Session session(model, std::stoi(l.at(2)));
    return session.decode(std::vector<int32_t>(codes.i32(), codes.i32() + codes.count()), codes.shape[0]);
}

}  // namespace qtts::check
