// tools/smax/ext_sparse.cc: the sparse ops of `smax run` (table in ext_ops.h).
#include "ext_ops.h"

namespace smax_cli {

void add_sparse_ops(std::vector<ExtOp>& ops) { (void)ops; }

}  // namespace smax_cli
