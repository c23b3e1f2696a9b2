// tools/smax/ext_sampling.cc: the sampling ops of `smax run` (table in ext_ops.h).
#include "ext_ops.h"

namespace smax_cli {

void add_sampling_ops(std::vector<ExtOp>& ops) { (void)ops; }

}  // namespace smax_cli
