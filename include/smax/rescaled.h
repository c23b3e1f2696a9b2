// smax/rescaled.h: SSMax, softpick, clipped softmax, StableMax (+ its
// cross-entropy) and the Softmax Collapse detector.
// They moved to smax/normalizers.h (with the other normalisers outside the
// sparse family); this header stays so that code including it still compiles.
#pragma once

#include "smax/normalizers.h"
