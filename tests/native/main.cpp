// qtts_native_check DIR OUT: runs every case of DIR/manifest.txt on every SIMD path this CPU has
// (scalar, then the best) and writes OUT/<case>.<path>.npy; OUT/paths.txt lists the paths (and,
// on aarch64 Linux, whether the CPU has the dot-product extension).
// Exit status 1 on the first failing case, with its line and the reason.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "check.h"
#include "ops/simd.h"

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

using namespace qtts;

int main(int argc, char ** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: %s DIR OUT (DIR: cases written by scripts/check_arm.py)\n", argv[0]);
        return 2;
    }
    const std::string dir = argv[1], out_dir = argv[2];
    std::vector<SimdPath> paths = {SimdPath::scalar};
    if (best_simd_path() != SimdPath::scalar) paths.push_back(best_simd_path());
    std::ofstream(out_dir + "/paths.txt") << [&] {
        std::string s;
        for (SimdPath p : paths) s += std::string(simd_path_name(p)) + "\n";
#if defined(__aarch64__) && defined(__linux__)
        // the CPU feature the Q8_0 kernel is chosen by (ops/qmatmul_arm.cpp)
        s += (getauxval(AT_HWCAP) & (1 << 20)) ? "dotprod\n" : "no dotprod\n";
#endif
        return s;
    }();
    std::ifstream manifest(dir + "/manifest.txt");
    std::string text;
    int cases = 0;
    while (std::getline(manifest, text)) {
        check::Line line;
        std::istringstream words(text);
        for (std::string w; words >> w;) line.push_back(w);
        if (line.size() < 2) continue;
        try {
            for (SimdPath p : paths) {
                set_simd_path(p);
                const std::string out = out_dir + "/" + line[1] + "." + simd_path_name(p) + ".npy";
                if (line[0] == "decode") {
                    const std::vector<float> y = check::run_decode(line, dir);
                    check::write_npy(out, {static_cast<int64_t>(y.size())}, y.data());
                } else if (line[0] == "generate") {
                    std::vector<int64_t> shape;
                    const std::vector<float> y = check::run_generate(line, dir, shape);
                    check::write_npy(out, shape, y.data());
                } else {
                    std::vector<int64_t> shape;
                    const std::vector<float> y = check::run_op(line, dir, shape);
                    check::write_npy(out, shape, y.data());
                }
            }
        } catch (const std::exception & e) {
            std::fprintf(stderr, "case '%s' failed: %s\n", text.c_str(), e.what());
            return 1;
        }
        ++cases;
    }
    std::printf("%d cases on %zu paths\n", cases, paths.size());
    return 0;
}
