#include "ops/amx.h"

#ifdef __linux__
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace qtts {

bool amx_tiles_permitted() {
#if defined(__linux__) && (defined(__x86_64__) || defined(__i386__))
    static const bool granted = syscall(SYS_arch_prctl, 0x1023, 18) == 0;
    return granted;
#else
    return false;
#endif
}

}  // namespace qtts
