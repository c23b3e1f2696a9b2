// smax/smax.h: the whole public C++ API.
#pragma once

#include "smax/error.h"
#include "smax/loss.h"
#include "smax/options.h"
#include "smax/runtime.h"
#include "smax/softmax.h"
#include "smax/tensor.h"
#include "smax/version.h"
