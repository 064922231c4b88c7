#include "runtime/mapped_file.h"

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "runtime/error.h"

#if defined(_WIN32)
#ifndef NOMINMAX
#define NOMINMAX
#endif
#include <windows.h>
#else
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#endif

namespace qtts {

MappedFile::MappedFile(const std::string & path) {
#if defined(_WIN32)
    // written for Windows, not built there yet (docs/kernels.md, "Builds")
    const std::wstring wide = std::filesystem::u8path(path).wstring();
    HANDLE file = CreateFileW(wide.c_str(), GENERIC_READ, FILE_SHARE_READ, nullptr, OPEN_EXISTING,
                              FILE_ATTRIBUTE_NORMAL, nullptr);
    if (file == INVALID_HANDLE_VALUE) fail("%s: cannot open (Windows error %lu)", path.c_str(), GetLastError());
    LARGE_INTEGER size{};
    GetFileSizeEx(file, &size);
    size_ = static_cast<size_t>(size.QuadPart);
    HANDLE mapping = size_ ? CreateFileMappingW(file, nullptr, PAGE_READONLY, 0, 0, nullptr) : nullptr;
    CloseHandle(file);
    if (mapping) {
        addr_ = MapViewOfFile(mapping, FILE_MAP_READ, 0, 0, 0);
        CloseHandle(mapping);
    }
    if (!addr_) fail("%s: cannot map the file (Windows error %lu)", path.c_str(), GetLastError());
#else
    int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) fail("%s: cannot open: %s", path.c_str(), std::strerror(errno));
    struct stat st{};
    ::fstat(fd, &st);
    size_ = static_cast<size_t>(st.st_size);
    addr_ = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    if (addr_ == MAP_FAILED) fail("%s: mmap failed: %s", path.c_str(), std::strerror(errno));
#endif
}

MappedFile::~MappedFile() {
#if defined(_WIN32)
    if (addr_) UnmapViewOfFile(addr_);
#else
    if (addr_ && addr_ != MAP_FAILED) ::munmap(addr_, size_);
#endif
}

void MappedFile::drop(const void * p, size_t n) const {
#if !defined(_WIN32)
    const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    const uintptr_t a = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
    const uintptr_t e = (reinterpret_cast<uintptr_t>(p) + n) / page * page;
    if (e > a) ::madvise(reinterpret_cast<void *>(a), e - a, MADV_DONTNEED);
#else
    (void)p;
    (void)n;
#endif
}

}  // namespace qtts
