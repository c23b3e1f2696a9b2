// src/reference/quantized.h: scalar oracles of the integer softmaxes
// (include/smax/quantized.h; docs/quantized.md). One contiguous row in, one
// row out, written from the published algorithms step by step (no SIMD, no
// shared code with src/ops/), for the tests and `smax run --check` (bound 0:
// exact). Parameters are assumed valid (the library checks them).
#pragma once

#include <cstdint>
#include <vector>

#include "smax/quantized.h"

namespace smax::reference {

/// I-BERT (HF IntSoftmax) of one row.
std::vector<int32_t> int_softmax_row(const std::vector<int32_t>& x, const IntSoftmaxOptions& p);
/// I-ViT Shiftmax of one row.
std::vector<int32_t> shiftmax_row(const std::vector<int32_t>& x, const ShiftmaxOptions& p);
/// ORT QLinearSoftmax of one u8 (is_signed false) or i8 row, values as ints.
std::vector<int32_t> qlinear_softmax_row(const std::vector<int32_t>& x, bool is_signed,
                                         const QLinearSoftmaxOptions& p);

}  // namespace smax::reference
