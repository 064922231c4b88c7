// The few .npy files the check reads and writes: version 1 headers, no Fortran order.
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "check.h"

namespace qtts::check {

namespace {

int64_t item_size(const std::string & descr) {
    if (descr == "<f4" || descr == "<i4") return 4;
    if (descr == "|u1") return 1;
    throw std::runtime_error("npy: unsupported dtype " + descr);
}

std::string field(const std::string & header, const std::string & key) {
    const size_t k = header.find("'" + key + "'");
    if (k == std::string::npos) throw std::runtime_error("npy: no " + key + " in header");
    return header.substr(header.find(':', k) + 1);
}

}  // namespace

int64_t Array::count() const {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    return n;
}

Array read_npy(const std::string & path) {
    std::ifstream f(path, std::ios::binary);
    char magic[10];
    if (!f.read(magic, 10) || std::memcmp(magic, "\x93NUMPY\x01", 7) != 0) {
        throw std::runtime_error(path + ": not an npy v1 file");
    }
    const size_t hlen = static_cast<uint8_t>(magic[8]) | static_cast<size_t>(static_cast<uint8_t>(magic[9])) << 8;
    std::string header(hlen, '\0');
    f.read(header.data(), static_cast<std::streamsize>(hlen));
    Array a;
    std::string d = field(header, "descr");
    a.descr = d.substr(d.find('\'') + 1, 3);
    if (field(header, "fortran_order").find("False") > 2) throw std::runtime_error(path + ": Fortran order");
    std::string s = field(header, "shape");
    s = s.substr(s.find('(') + 1, s.find(')') - s.find('(') - 1);
    for (size_t p = 0; p < s.size();) {
        const size_t q = s.find(',', p);
        const std::string tok = s.substr(p, q == std::string::npos ? std::string::npos : q - p);
        if (tok.find_first_of("0123456789") != std::string::npos) a.shape.push_back(std::stoll(tok));
        if (q == std::string::npos) break;
        p = q + 1;
    }
    a.data.resize(static_cast<size_t>(a.count() * item_size(a.descr)));
    if (!f.read(reinterpret_cast<char *>(a.data.data()), static_cast<std::streamsize>(a.data.size()))) {
        throw std::runtime_error(path + ": truncated");
    }
    return a;
}

void write_npy(const std::string & path, const std::vector<int64_t> & shape, const float * values) {
    std::string dims;
    int64_t n = 1;
    for (int64_t s : shape) {
        dims += std::to_string(s) + ",";
        n *= s;
    }
    std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
    header.append(64 - (10 + header.size() + 1) % 64, ' ');
    header += '\n';
    std::ofstream f(path, std::ios::binary);
    const char magic[8] = {'\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0};
    f.write(magic, 8);
    const uint16_t hlen = static_cast<uint16_t>(header.size());
    const char len[2] = {static_cast<char>(hlen & 0xff), static_cast<char>(hlen >> 8)};
    f.write(len, 2);
    f << header;
    f.write(reinterpret_cast<const char *>(values), static_cast<std::streamsize>(n * sizeof(float)));
    if (!f) throw std::runtime_error(path + ": write failed");
}

}  // namespace qtts::check
