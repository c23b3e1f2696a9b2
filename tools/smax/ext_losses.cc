// tools/smax/ext_losses.cc: the losses ops of `smax run` (table in ext_ops.h).
#include "ext_ops.h"

namespace smax_cli {

void add_loss_ops(std::vector<ExtOp>& ops) { (void)ops; }

}  // namespace smax_cli
