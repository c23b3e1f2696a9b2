// tools/smax/ext_reweight.cc: the reweight ops of `smax run` (table in ext_ops.h).
#include "ext_ops.h"

namespace smax_cli {

void add_reweight_ops(std::vector<ExtOp>& ops) { (void)ops; }

}  // namespace smax_cli
