// smax/cross_entropy.h: fused cross-entropy and the z-losses. They moved to
// smax/losses.h (with every other loss); this header stays so that code
// including it still compiles.
#pragma once

#include "smax/losses.h"
