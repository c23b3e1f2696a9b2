// smax/smax.h: the whole public C++ API.
#pragma once

#include "smax/error.h"
#include "smax/loss.h"
#include "smax/options.h"
#include "smax/runtime.h"
#include "smax/softmax.h"
#include "smax/sparse.h"
#include "smax/rescaled.h"
#include "smax/reweight.h"
#include "smax/sampling.h"
#include "smax/detection.h"
#include "smax/attention.h"
#include "smax/cross_entropy.h"
#include "smax/linear_cross_entropy.h"
#include "smax/tensor.h"
#include "smax/version.h"
