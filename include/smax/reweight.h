// smax/reweight.h: SA-Softmax, the sigmoid and softplus (LSSA) normalisers,
// Power-Softmax, probability-domain temperature and logit standardisation.
// They moved to smax/normalizers.h (with the other normalisers outside the
// sparse family); this header stays so that code including it still compiles.
#pragma once

#include "smax/normalizers.h"
