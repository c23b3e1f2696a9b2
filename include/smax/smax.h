// smax/smax.h: the whole public C++ API.
#pragma once

#include "smax/error.h"
#include "smax/loss.h"
#include "smax/options.h"
#include "smax/runtime.h"
#include "smax/softmax.h"
#include "smax/sparse.h"
#include "smax/normalizers.h"
#include "smax/sampling.h"
#include "smax/detection.h"
#include "smax/distributed.h"
#include "smax/attention.h"
#include "smax/logit_scale.h"
#include "smax/losses.h"
#include "smax/quantized.h"
#include "smax/tensor.h"
#include "smax/version.h"
