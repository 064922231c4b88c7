// The constants of SnakeBeta's sin^2 (ops/snake_beta.cpp), shared by its scalar, x86 and NEON
// (ops/ops_neon.cpp) kernels so that every path evaluates the same polynomials.
#pragma once

namespace qtts::sin2_consts {

// sin^2 by Cody-Waite reduction to |r| <= pi/4 and the Cephes sinf/cosf polynomials: sin^2
// needs only the parity of the quadrant. Relative error ~1e-7 for |z| up to ~1e4.
constexpr float kTwoOverPi = 0.636619772367581343f;
constexpr float kPio2A = 1.5703125f, kPio2B = 4.837512969970703125e-4f, kPio2C = 7.54978995489188216e-8f;
constexpr float kS1 = -1.6666654611e-1f, kS2 = 8.3321608736e-3f, kS3 = -1.9515295891e-4f;
constexpr float kC1 = 4.166664568298827e-2f, kC2 = -1.388731625493765e-3f, kC3 = 2.443315711809948e-5f;

}  // namespace qtts::sin2_consts
