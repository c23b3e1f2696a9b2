// tools/smax/help.cc: usage texts (kept in sync with docs/cli.md).
#include "commands.h"

namespace smax_cli {

const char* const kMainHelp = R"(smax - the fastest exact softmax family on CPUs

usage: smax COMMAND [OPTIONS]

commands:
  info       CPU features, cache sizes, SIMD targets and the kernel each op uses
  run        time one op on one shape, optionally checking it against float64
  compare    smax's softmax algorithms vs each other and a naive loop, 1K..32M
  attention  time fused attention (any normaliser, causal, GQA), forward or backward
  bench      smax against its peers (PyTorch, ONNX Runtime, oneDNN, XNNPACK):
             `smax bench --peers` runs the peer benchmarks of bench/peers/
  help CMD   help for one command (same as smax CMD --help)

options:
  -h, --help     this help
  -V, --version  print the version

Exit status: 0 ok, 1 `--check` found errors above the documented bounds,
2 bad arguments or an error from the library (one line on stderr,
starting with "smax: error: "), 3 `smax bench --peers`: a peer asked for
is missing.

Long runs show a progress line on stderr when it is a terminal
(SMAX_PROGRESS=1 forces it, SMAX_PROGRESS=0 turns it off).
Documentation: docs/cli.md.
)";

const char* const kInfoHelp = R"(usage: smax info [--target T] [--format text|json] [--ops]

Prints the version, the CPU model and SIMD features, cache sizes, thread
count, the Highway targets compiled in / supported by this CPU / active, and
the kernel each op dispatches to with --algo auto for a few row lengths.

  --target T       cap the SIMD target first (avx3, avx2, sse4, ssse3, scalar)
  --format F       text (default) or json
  --ops            list every op `smax run --op` accepts, with its parameters
                   (types and defaults); with --format json, as JSON
)";

const char* const kRunHelp = R"(usage: smax run [OPTIONS]

Times one op on a contiguous row-major tensor and prints the median time per
call and per element, the spread over samples and, for the softmax family,
GB/s (the op's ideal traffic: softmax/log_softmax 8 bytes per element,
logsumexp 4, backward 12).

  --op OP          softmax (default), log_softmax, logsumexp, softmax_backward,
                   log_softmax_backward, or any op listed by `smax info --ops`
                   (e.g. sparsemax, entmax15, cross_entropy, softmax_topk,
                   linear_cross_entropy, attention, soft_nms: the ops with
                   their own inputs are listed at the end)
  --param P        op parameters NAME=VALUE[,NAME=VALUE] (e.g. alpha=1.3,n_iter=30);
                   typed: real, int (no fractions), bool (true, false, 1, 0);
                   `smax info --ops` lists each op's parameters; ops without
                   parameters (the softmax family, sparsemax, ...) reject it
  --reduction R    losses only: mean (default), sum, none
  --shape S        e.g. 256x32000 (default), 33554432, 8x128x512; K/M/G suffixes
  --axis A         reduced axis, negative counts from the end (default -1)
  --algo A         auto (default), three-pass-reload, three-pass-recompute,
                   two-pass, online (the softmax family only)
  --threads N      threads, 1..4096 (default: smax::max_threads())
  --target T       cap the SIMD target: avx3, avx2, sse4, ssse3, scalar
  --dist D         logits: normal (default, N(0,1)), normal:MEAN,STD, uniform:LO,HI
  --scale S        multiply the logits by S > 0 (default 1)
  --seed N         data seed (default 1)
  --dtype T        storage dtype of the op's floating inputs and output: f32
                   (default), f64, f16, bf16; inputs are rounded to T and the
                   reference runs on the rounded values (docs/dtypes.md);
                   integer ops: qlinear_softmax u8 (default) or i8,
                   int_softmax / shiftmax i32
  --repeat N       take exactly N timed samples
  --min-time SEC   otherwise sample for at least SEC seconds (default 0.5);
                   a sample batches calls to last >= 20 us (calls_per_sample)
  --check          compare with the float64 reference: max relative / absolute
                   error and whether they are within the documented bounds
                   (exit status 1 when they are not)
  --format F       text (default) or json
Backward ops time dx from y = op(x) (computed by smax) and dy ~ N(0,1).
Losses draw class targets uniformly from [0, C) with the same seed.
)";

const char* const kCompareHelp = R"(usage: smax compare [OPTIONS]

Softmax over one row of each size: smax's four algorithms and auto against a
naive scalar loop (std::exp; max, sum and divide in float) and memcpy (the
read+write memory floor), with ns/element, GB/s (8 bytes per element for
f32: read + write), the speed-up over the naive loop and the max relative
error against the float64 reference. spread: (p90 - p10) / median of the
per-call time over the samples; "!" marks a noisy measurement (spread above 10%).

  --sizes LIST     comma-separated sizes and LO..HI ranges (powers of 4 from
                   LO, then HI); default 1K..32M = 1K,4K,16K,64K,256K,1M,4M,16M,32M
  --threads N      threads for smax, 1..4096 (default 1; the naive loop and
                   memcpy always use one)
  --target T       cap the SIMD target: avx3, avx2, sse4, ssse3, scalar
  --dist D         logits: normal (default), normal:MEAN,STD, uniform:LO,HI
  --seed N         data seed (default 1)
  --min-time SEC   sampling time per measurement (default 0.25)
  --dtype T        storage dtype of the row: f32 (default), f64, f16, bf16.
                   The row is generated in f32 and rounded to T once; smax,
                   the naive loop (in double for f64, float otherwise) and
                   memcpy read and write T (GB/s: 2 x sizeof(T) per element);
                   errors are against the reference on the rounded inputs
                   (long double for f64), plus an ulps column: the max
                   distance in T values from the reference rounded to T
  --format F       text (default) or json
)";

}  // namespace smax_cli
