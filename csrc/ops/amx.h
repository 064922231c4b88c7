// What the AMX tile kernels (ops/qmatmul_amx.cpp, ops/conv_gemm_bf16.cpp) share: the tile
// configuration's layout and the OS's leave to use the tiles.
#pragma once

#include <cstdint>

namespace qtts {

// LDTILECFG's 64-byte operand, palette 1: each tile's rows and bytes per row.
struct alignas(64) TileConfig {
    uint8_t palette = 1, start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64, "ldtilecfg reads 64 bytes");

// Whether the OS lets this process use the tiles: Linux hands out the 8 KiB tile state only to a
// process that asks for it (ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA), after which every
// thread may use it. Asked once; false elsewhere.
bool amx_tiles_permitted();

}  // namespace qtts
