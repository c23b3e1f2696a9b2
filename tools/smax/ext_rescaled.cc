// tools/smax/ext_rescaled.cc: the rescaled ops of `smax run` (table in ext_ops.h).
#include "ext_ops.h"

namespace smax_cli {

void add_rescaled_ops(std::vector<ExtOp>& ops) { (void)ops; }

}  // namespace smax_cli
