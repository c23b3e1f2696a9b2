/* smax/c/smax.h: the C ABI of smax (C99, no C++ needed to use it).
 *
 * A stable, exception-free interface to the softmax family, for C programs
 * and for foreign-function interfaces (ctypes, cffi, Rust, Julia, ...).
 * Every function here is a thin wrapper over the C++ API (smax/smax.h) with
 * exactly the same semantics, bounds and special-value rules; see
 * include/smax/softmax.h and docs/numerics.md for the numerics, and
 * docs/reliability.md for the guarantees.
 *
 * Conventions
 * -----------
 * - Functions that can fail return an smax_status. SMAX_STATUS_OK (0) means
 *   success; any other value means nothing was written to the destination and
 *   smax_last_error() returns a message naming the offending argument, e.g.
 *   "softmax: axis 3 is out of range for rank 2".
 * - No C++ exception ever crosses this boundary: smax::Error maps to its
 *   status, std::bad_alloc to SMAX_STATUS_OUT_OF_MEMORY and anything else to
 *   SMAX_STATUS_INTERNAL (a bug in smax; please report it).
 * - Tensors are described by smax_tensor (data pointer, dtype, rank, shape,
 *   strides counted in *elements*). The library never keeps a pointer to a
 *   descriptor, an options struct or their data after a call returns.
 * - Thread safety: every op may be called from many threads at once (on
 *   disjoint outputs). smax_set_max_target() and smax_set_max_threads()
 *   change process-wide defaults; call them between ops.
 *
 * Example
 * -------
 *   float x[2][3] = {{1, 2, 3}, {4, 5, 6}}, y[2][3];
 *   int64_t shape[2] = {2, 3};
 *   smax_tensor src, dst;
 *   smax_tensor_init(&src, x, SMAX_DTYPE_F32, 2, shape, NULL);
 *   smax_tensor_init(&dst, y, SMAX_DTYPE_F32, 2, shape, NULL);
 *   if (smax_softmax(&src, &dst, NULL) != SMAX_STATUS_OK)
 *     fprintf(stderr, "%s\n", smax_last_error());
 */
#ifndef SMAX_C_SMAX_H_
#define SMAX_C_SMAX_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Version of this header; compare with smax_version() at run time. */
#define SMAX_C_VERSION_MAJOR 0
#define SMAX_C_VERSION_MINOR 1
#define SMAX_C_VERSION_PATCH 0

/** Largest rank a tensor may have (smax::kMaxRank). */
#define SMAX_MAX_RANK 8

/** Why a call failed. Same values as smax::Status. */
typedef enum smax_status {
  SMAX_STATUS_OK = 0,
  SMAX_STATUS_INVALID_ARGUMENT = 1, /**< bad shape, stride, pointer, option or value */
  SMAX_STATUS_UNSUPPORTED = 2,      /**< valid request this build cannot serve */
  SMAX_STATUS_OUT_OF_MEMORY = 3,    /**< a scratch allocation failed */
  SMAX_STATUS_INTERNAL = 4          /**< a bug in smax (an unexpected exception) */
} smax_status;

/** Element types (smax::DType). Stored as int32_t in smax_tensor. */
typedef enum smax_dtype {
  SMAX_DTYPE_F32 = 0, /**< float, the compute type */
  SMAX_DTYPE_BOOL = 1 /**< one byte, 0 = masked out, non-zero = kept (masks only) */
} smax_dtype;

/** Normaliser algorithm (smax::Algorithm). All meet the same bounds. */
typedef enum smax_algorithm {
  SMAX_ALGORITHM_AUTO = 0,
  SMAX_ALGORITHM_THREE_PASS_RELOAD = 1,
  SMAX_ALGORITHM_THREE_PASS_RECOMPUTE = 2,
  SMAX_ALGORITHM_TWO_PASS = 3,
  SMAX_ALGORITHM_ONLINE = 4
} smax_algorithm;

/** What a row whose entries are all masked or -inf produces (smax::EmptyRow). */
typedef enum smax_empty_row {
  SMAX_EMPTY_ROW_ZERO = 0, /**< softmax 0, log_softmax -inf, logsumexp -inf, gradient 0 */
  SMAX_EMPTY_ROW_NAN = 1   /**< NaN everywhere (torch.softmax behaviour) */
} smax_empty_row;

/** A non-owning strided view of caller memory (like DLPack's DLTensor).
 *  Only the first `rank` entries of shape and strides are read. Strides count
 *  elements, may be negative, and may be 0 for inputs (broadcast). Rank 0 is
 *  a scalar (shape [1]). Source tensors are never written. */
typedef struct smax_tensor {
  void* data;                     /**< first element (index 0 in every dim) */
  int32_t dtype;                  /**< an smax_dtype value */
  int32_t rank;                   /**< 0 .. SMAX_MAX_RANK */
  int64_t shape[SMAX_MAX_RANK];   /**< sizes, >= 0 */
  int64_t strides[SMAX_MAX_RANK]; /**< in elements */
} smax_tensor;

/** Fills `tensor`: `rank` entries of `shape`; `strides` NULL means row-major
 *  contiguous. Returns SMAX_STATUS_INVALID_ARGUMENT (and leaves `tensor`
 *  untouched) for a NULL tensor, a NULL shape with rank > 0, a rank outside
 *  [0, SMAX_MAX_RANK] or an unknown dtype. Sizes and strides are checked by
 *  the ops. */
smax_status smax_tensor_init(smax_tensor* tensor, void* data, int32_t dtype, int32_t rank,
                             const int64_t* shape, const int64_t* strides);

/** Options of every op (smax::SoftmaxOptions). Always start from
 *  smax_softmax_options_init(): it sets the defaults and `struct_size`, which
 *  lets later versions add fields without breaking callers compiled against
 *  this header. Passing NULL options to an op means the defaults. */
typedef struct smax_softmax_options {
  uint32_t struct_size;             /**< sizeof(smax_softmax_options); set by init */
  int32_t algorithm;                /**< an smax_algorithm value (default AUTO) */
  int64_t axis;                     /**< reduced dim; negative counts from the end (default -1) */
  float scale;                      /**< multiplies the logits; finite, > 0 (default 1) */
  float temperature;                /**< divides the logits; finite, > 0 (default 1) */
  const smax_tensor* additive_mask; /**< f32, added after scaling; NULL = none */
  const smax_tensor* bool_mask;     /**< SMAX_DTYPE_BOOL, 0 = masked out; NULL = none */
  int32_t empty_row;                /**< an smax_empty_row value (default ZERO) */
  int32_t threads;                  /**< 0 = smax_max_threads(); results do not depend on it */
} smax_softmax_options;

/** Sets every field of `options` to its default (axis -1, scale 1,
 *  temperature 1, no masks, AUTO, EMPTY_ROW_ZERO, threads 0) and
 *  struct_size. Does nothing when `options` is NULL. */
void smax_softmax_options_init(smax_softmax_options* options);

/* ---- ops ------------------------------------------------------------------
 * Each is smax::<name> of include/smax/softmax.h: same layouts, aliasing rules
 * (dst may be exactly src; dx may be exactly dy; any other overlap is
 * rejected), error bounds, special values and determinism. NULL tensor
 * pointers are SMAX_STATUS_INVALID_ARGUMENT. On any non-OK status nothing was
 * written to dst / dx. */

/** y_i = exp(t_i - m) / sum_j exp(t_j - m), per row of options->axis. */
smax_status smax_softmax(const smax_tensor* src, const smax_tensor* dst,
                         const smax_softmax_options* options);
/** y_i = (t_i - m) - log(sum_j exp(t_j - m)). */
smax_status smax_log_softmax(const smax_tensor* src, const smax_tensor* dst,
                             const smax_softmax_options* options);
/** One value per row: m + log(sum_j exp(t_j - m)); dst has src's shape
 *  without the axis (or with it of size 1). */
smax_status smax_logsumexp(const smax_tensor* src, const smax_tensor* dst,
                           const smax_softmax_options* options);
/** dx = s * y * (dy - <dy, y>), s = scale / temperature. */
smax_status smax_softmax_backward(const smax_tensor* y, const smax_tensor* dy,
                                  const smax_tensor* dx, const smax_softmax_options* options);
/** dx = s * (dy - exp(y) * sum(dy)), 0 where y = -inf. */
smax_status smax_log_softmax_backward(const smax_tensor* y, const smax_tensor* dy,
                                      const smax_tensor* dx,
                                      const smax_softmax_options* options);

/* ---- errors --------------------------------------------------------------- */

/** Message of the most recent failed smax call on the calling thread, or ""
 *  when the most recent call succeeded (every call that returns a status
 *  resets it). The pointer stays valid until the next smax call on this
 *  thread. Never NULL. */
const char* smax_last_error(void);
/** "ok", "invalid argument", "unsupported", "out of memory", "internal error";
 *  "unknown status" for other values. Never NULL. */
const char* smax_status_name(smax_status status);

/* ---- runtime -------------------------------------------------------------- */

/** The SIMD target kernels dispatch to now, e.g. "AVX2". The pointer stays
 *  valid until the next smax call on this thread. */
const char* smax_active_target(void);
/** Cap the dispatched target: "avx3", "avx2", "sse4", "ssse3", "scalar"
 *  (case-insensitive), or "" / "none" / NULL to lift the cap. Unknown or not
 *  compiled names give SMAX_STATUS_INVALID_ARGUMENT and change nothing. Not
 *  thread-safe against ops in flight. */
smax_status smax_set_max_target(const char* name);
/** Default thread count used when options.threads == 0. */
int32_t smax_max_threads(void);
/** Changes the default thread count (>= 1, else SMAX_STATUS_INVALID_ARGUMENT). */
smax_status smax_set_max_threads(int32_t threads);
/** Library version, "MAJOR.MINOR.PATCH". */
const char* smax_version(void);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif /* SMAX_C_SMAX_H_ */
