/* smax/c/smax.h: the C ABI of smax (C99, no C++ needed to use it).
 *
 * A stable, exception-free interface to every public op of smax, for C
 * programs and for foreign-function interfaces (ctypes, cffi, Rust, Julia,
 * ...). Every function here is a thin wrapper over the C++ function of the
 * same name (smax_<name> -> smax::<name>) with exactly the same semantics,
 * error bounds, special-value rules, aliasing rules and determinism; the C++
 * headers (include/smax/softmax.h, sparse.h, rescaled.h, reweight.h,
 * sampling.h, cross_entropy.h, linear_cross_entropy.h, loss.h) are the
 * reference for the numerics. docs/c_api.md gives the rule that maps every
 * function and options struct to its C++ counterpart, and its few exceptions;
 * docs/reliability.md states the guarantees.
 *
 * Conventions
 * -----------
 * - Functions that can fail return an smax_status. SMAX_STATUS_OK (0) means
 *   success; any other value means nothing was written to any output and
 *   smax_last_error() returns a message naming the op and the offending
 *   argument, e.g. "softmax: axis 3 is out of range for rank 2".
 * - No C++ exception ever crosses this boundary: smax::Error maps to its
 *   status, std::bad_alloc to SMAX_STATUS_OUT_OF_MEMORY and anything else to
 *   SMAX_STATUS_INTERNAL (a bug in smax; please report it).
 * - Tensors are described by smax_tensor (data pointer, dtype, rank, shape,
 *   strides counted in *elements*). Inputs and outputs are both passed as
 *   `const smax_tensor*`: the descriptor is read-only, an output's *data* is
 *   written. Optional tensors are nullable pointers (NULL = not given).
 * - Options: every op takes `const smax_softmax_options*` (NULL = defaults:
 *   axis -1, no masks, ...). Ops with parameters take a small options struct
 *   of their own (smax_<op>_options, NULL = the documented defaults); losses
 *   take `const smax_loss_options*` (NULL = ignore_index -100, mean). The
 *   argument order is: tensors (inputs, then outputs), scalar parameters,
 *   the op's options struct, the loss options, the softmax options, then
 *   pointers that receive scalar results (NULL = not wanted).
 * - Versioned structs: every options struct starts with `uint32_t
 *   struct_size` and has an *_init function that sets struct_size and the
 *   defaults. Always start from the init function. A struct_size smaller
 *   than this library's struct is SMAX_STATUS_INVALID_ARGUMENT; a larger one
 *   (a caller built against a newer header) is accepted when the bytes this
 *   library does not know are all zero (fields added later are defined so
 *   that zero means the old behaviour) and is SMAX_STATUS_UNSUPPORTED
 *   otherwise (the caller asked for something this library cannot do).
 * - Enums are plain int32_t fields (an enum's size is not fixed in C);
 *   unknown values are SMAX_STATUS_INVALID_ARGUMENT. Boolean fields are
 *   int32_t and must be 0 or 1.
 * - The library never keeps a pointer to a descriptor, an options struct or
 *   their data after a call returns, and never allocates memory the caller
 *   must free.
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
#define SMAX_C_VERSION_MINOR 7
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
  SMAX_DTYPE_F32 = 0,  /**< float, the compute type */
  SMAX_DTYPE_BOOL = 1, /**< one byte, 0 = masked out, non-zero = kept (masks only) */
  SMAX_DTYPE_I64 = 2,  /**< int64_t: class-index targets and returned indices */
  SMAX_DTYPE_F64 = 3,  /**< double */
  SMAX_DTYPE_F16 = 4,  /**< IEEE binary16 (uint16_t bits) */
  SMAX_DTYPE_BF16 = 5, /**< bfloat16: the upper 16 bits of a float (uint16_t bits) */
  SMAX_DTYPE_U8 = 6,   /**< uint8_t: quantised tensors */
  SMAX_DTYPE_I8 = 7,   /**< int8_t: quantised tensors */
  SMAX_DTYPE_I32 = 8   /**< int32_t: integer-only softmax inputs */
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

/** Loss reduction (smax::Reduction). */
typedef enum smax_reduction {
  SMAX_REDUCTION_NONE = 0, /**< one loss per row (dst has the targets' shape) */
  SMAX_REDUCTION_MEAN = 1, /**< weighted mean over the non-ignored rows (dst: one element) */
  SMAX_REDUCTION_SUM = 2   /**< sum of the weighted losses (dst: one element) */
} smax_reduction;

/** What a mean over zero non-ignored rows gives (smax::EmptyMean). */
typedef enum smax_empty_mean {
  SMAX_EMPTY_MEAN_NAN = 0, /**< 0/0 like PyTorch */
  SMAX_EMPTY_MEAN_ZERO = 1 /**< 0 (and zero gradient) */
} smax_empty_mean;

/** Working precision simulated by smax_softmax_collapse_fraction (smax::Precision). */
typedef enum smax_precision {
  SMAX_PRECISION_F32 = 0,
  SMAX_PRECISION_F16 = 1,
  SMAX_PRECISION_BF16 = 2
} smax_precision;

/** Soft-NMS decay (smax::SoftNmsMethod). */
typedef enum smax_soft_nms_method {
  SMAX_SOFT_NMS_HARD = 0,    /**< classic NMS: iou > Nt -> score 0 */
  SMAX_SOFT_NMS_LINEAR = 1,  /**< iou > Nt -> score * (1 - iou) (default) */
  SMAX_SOFT_NMS_GAUSSIAN = 2 /**< score * exp(-iou^2 / sigma) */
} smax_soft_nms_method;

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

/* ==== options ============================================================= */

/** Options of every op (smax::SoftmaxOptions): the reduced axis and the
 *  logit transform t = x * scale / temperature + additive_mask (-inf where
 *  bool_mask == 0). Passing NULL to an op means the defaults. */
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
 *  struct_size. Does nothing when `options` is NULL (as every *_init). */
void smax_softmax_options_init(smax_softmax_options* options);

/** Options shared by every loss (smax::LossOptions, include/smax/loss.h):
 *  class-index targets (SMAX_DTYPE_I64, src's shape without the class axis,
 *  or with it of size 1); a target equal to ignore_index contributes 0 loss,
 *  0 weight and 0 gradient; any other target outside [0, C) is an error. */
typedef struct smax_loss_options {
  uint32_t struct_size;      /**< set by smax_loss_options_init */
  int32_t reduction;         /**< an smax_reduction value (default MEAN) */
  int64_t ignore_index;      /**< default -100 */
  const smax_tensor* weight; /**< f32 [C] class weights; NULL = all 1 */
  int32_t empty_mean;        /**< an smax_empty_mean value (default NAN) */
} smax_loss_options;
void smax_loss_options_init(smax_loss_options* options);

/** smax::EntmaxBisectOptions. */
typedef struct smax_entmax_bisect_options {
  uint32_t struct_size;
  float alpha;                     /**< > 1, finite; 1 routes to softmax (default 1.5) */
  int32_t n_iter;                  /**< bisection steps, >= 1 (default 50) */
  int32_t ensure_sum_one;          /**< 0/1: divide by the sum (default 1) */
  const smax_tensor* alpha_tensor; /**< optional per-row alpha (f32, keepdim shape); NULL = none */
} smax_entmax_bisect_options;
void smax_entmax_bisect_options_init(smax_entmax_bisect_options* options);

/** smax::SparseSoftmaxLossOptions. */
typedef struct smax_sparse_softmax_loss_options {
  uint32_t struct_size;
  int32_t force_target; /**< 0/1: the target joins the kept set (default 0) */
} smax_sparse_softmax_loss_options;
void smax_sparse_softmax_loss_options_init(smax_sparse_softmax_loss_options* options);

/** smax::SsmaxOptions. */
typedef struct smax_ssmax_options {
  uint32_t struct_size;
  float s;                   /**< the scaling parameter, finite (default 0.43) */
  int64_t fixed_n;           /**< 0 = visible entries of the row; > 0 a fixed n (default 0) */
  const smax_tensor* s_rows; /**< optional per-row s (f32, keepdim shape); NULL = use s */
} smax_ssmax_options;
void smax_ssmax_options_init(smax_ssmax_options* options);

/** smax::SoftpickOptions. */
typedef struct smax_softpick_options {
  uint32_t struct_size;
  float eps; /**< 0 or finite >= FLT_MIN (default 1e-6) */
} smax_softpick_options;
void smax_softpick_options_init(smax_softpick_options* options);

/** smax::ClippedSoftmaxOptions. */
typedef struct smax_clipped_softmax_options {
  uint32_t struct_size;
  float gamma; /**< finite, <= 0 (default -0.025) */
  float zeta;  /**< finite, >= 1 (default 1) */
} smax_clipped_softmax_options;
void smax_clipped_softmax_options_init(smax_clipped_softmax_options* options);

/** smax::SelfAdjustOptions. */
typedef struct smax_self_adjust_options {
  uint32_t struct_size;
  int32_t normalized;          /**< 0/1: (t - a)/(b - a) instead of t (default 0) */
  int32_t grad_through_bounds; /**< 0/1: differentiate a and b (default 1) */
} smax_self_adjust_options;
void smax_self_adjust_options_init(smax_self_adjust_options* options);

/** smax::SigmoidNormalizerOptions. */
typedef struct smax_sigmoid_normalizer_options {
  uint32_t struct_size;
  int32_t has_bias;      /**< 0/1: use `bias` instead of -ln n (default 0) */
  float bias;            /**< fixed bias, finite (read when has_bias) */
  int32_t count_visible; /**< 0/1: n = visible entries instead of the row length (default 0) */
  int64_t n_fixed;       /**< > 0: fixed n for the default bias (default 0) */
} smax_sigmoid_normalizer_options;
void smax_sigmoid_normalizer_options_init(smax_sigmoid_normalizer_options* options);

/** smax::SoftplusNormalizerOptions. */
typedef struct smax_softplus_normalizer_options {
  uint32_t struct_size;
  int32_t has_lambda; /**< 0/1: use `lambda` instead of log N / log head_dim (default 0) */
  float lambda;       /**< fixed lambda, finite > 0 (read when has_lambda) */
  float power;        /**< re-weighting power, finite > 0 (default 1 = off) */
  int64_t head_dim;   /**< d for the default lambda, >= 2 when has_lambda == 0 */
} smax_softplus_normalizer_options;
void smax_softplus_normalizer_options_init(smax_softplus_normalizer_options* options);

/** smax::LogitStandardizationOptions. */
typedef struct smax_logit_standardization_options {
  uint32_t struct_size;
  float temperature; /**< finite > 0 (default 1) */
  float eps;         /**< finite >= 0, added to the std (default 1e-7) */
  int32_t unbiased;  /**< 0/1: std with N - 1 (1, default) or N (0) */
} smax_logit_standardization_options;
void smax_logit_standardization_options_init(smax_logit_standardization_options* options);

/** smax::GumbelSoftmaxOptions. */
typedef struct smax_gumbel_softmax_options {
  uint32_t struct_size;
  float tau;                 /**< finite > 0 (default 1) */
  int32_t hard;              /**< 0/1: straight-through one-hot output (default 0) */
  uint64_t seed;             /**< noise seed, ignored when noise is given (default 0) */
  const smax_tensor* noise;  /**< optional explicit noise g (f32, src's shape); NULL = seeded */
  const smax_tensor* y_soft; /**< optional f32 output (src's shape): the soft sample */
} smax_gumbel_softmax_options;
void smax_gumbel_softmax_options_init(smax_gumbel_softmax_options* options);

/** smax::SoftmaxTopkOptions without k (k is an argument of smax_softmax_topk). */
typedef struct smax_softmax_topk_options {
  uint32_t struct_size;
  int32_t renormalize; /**< 0/1: probabilities over the k winners only (default 0) */
} smax_softmax_topk_options;
void smax_softmax_topk_options_init(smax_softmax_topk_options* options);

/** smax::TopKTies: entries tied with the k-th largest at the top-k boundary. */
typedef enum smax_top_k_ties {
  SMAX_TOP_K_TIES_EXACT = 0, /**< exactly top_k entries, the lower index first */
  SMAX_TOP_K_TIES_KEEP = 1   /**< every entry equal to the k-th (transformers' rule) */
} smax_top_k_ties;

/** smax::SampleOptions. */
typedef struct smax_sample_options {
  uint32_t struct_size;
  float temperature; /**< finite >= 0; 0 = greedy (default 1) */
  float top_p;       /**< in (0, 1]; 1 = off (default 1) */
  int64_t top_k;     /**< >= 0; 0 = off (default 0) */
  uint64_t seed;     /**< default 0 */
  /* ---- version 0.5: struct_size may stop here (32 bytes) ---- */
  float min_p;                /**< in [0, 1]; 0 = off (default 0): keep p_i >= min_p p_max */
  int32_t min_tokens_to_keep; /**< >= 1; 0 = the default, 1: the floor of every filter */
  int32_t top_k_ties;         /**< an smax_top_k_ties value (default EXACT) */
  int32_t reserved0;          /**< must be 0 (explicit padding: the tail of version 0.6) */
} smax_sample_options;
void smax_sample_options_init(smax_sample_options* options);

/** smax::SoftNmsOptions. */
typedef struct smax_soft_nms_options {
  uint32_t struct_size;
  int32_t method;        /**< an smax_soft_nms_method value (default LINEAR) */
  float sigma;           /**< gaussian width, finite > 0 (default 0.5) */
  float iou_threshold;   /**< Nt, in [0, 1] (default 0.3) */
  float score_threshold; /**< finite (default 0.001) */
  int32_t plus_one;      /**< 0/1: pixel convention x2 - x1 + 1 (default 0) */
} smax_soft_nms_options;
void smax_soft_nms_options_init(smax_soft_nms_options* options);

/** smax::CrossEntropyOptions without its LossOptions (passed separately as
 *  smax_loss_options). The optional outputs are f32 tensors with the
 *  targets' shape (kNone) or one element (mean/sum), NULL = not wanted. */
typedef struct smax_cross_entropy_options {
  uint32_t struct_size;
  float label_smoothing;             /**< in [0, 1] (default 0) */
  float lse_square_scale;            /**< PaLM z-loss coefficient, finite >= 0 (default 0) */
  float softcap;                     /**< 0 = off, else finite > 0 (default 0) */
  const smax_tensor* z_loss;         /**< out: the z-loss part, reduced like the loss */
  const smax_tensor* lse;            /**< out (forward) / in (backward, when no smoothing) */
  const smax_tensor* entropy;        /**< out: entropy of softmax(t) per row */
  const smax_tensor* target_logprob; /**< out: log p_target per row */
  const smax_tensor* accuracy;       /**< out: argmax == target (per row, mean or count) */
  /** out (smax_cross_entropy only): d loss / d src for a unit upstream
   *  gradient, src's shape, written in the same pass as the loss (may be
   *  exactly src: the logits are overwritten by their gradient).
   *  smax_cross_entropy_backward and the linear cross-entropy reject it. */
  const smax_tensor* grad;
} smax_cross_entropy_options;
void smax_cross_entropy_options_init(smax_cross_entropy_options* options);

/** smax::LinearCrossEntropyOptions (tiling; 0 = automatic). */
typedef struct smax_linear_cross_entropy_options {
  uint32_t struct_size;
  int64_t token_chunk; /**< tokens per tile, >= 0 (default 0) */
  int64_t vocab_chunk; /**< classes per tile, >= 0 (default 0) */
} smax_linear_cross_entropy_options;
void smax_linear_cross_entropy_options_init(smax_linear_cross_entropy_options* options);

/* ==== softmax family (include/smax/softmax.h) ================================
 * dst may be exactly src; dx may be exactly dy; any other overlap is
 * rejected. NULL tensor pointers are SMAX_STATUS_INVALID_ARGUMENT. */

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
/** Gradients of the logit scale and temperature of any op taking
 *  smax_softmax_options (smax/logit_scale.h), from its input `src` and its
 *  input gradient `dsrc` (same shape, any floating dtypes): with
 *  S = sum_i src_i * dsrc_i (terms with dsrc_i == 0 left out, float64, fixed
 *  order), *dtemperature = -S / temperature and *dscale = S / scale (either
 *  pointer may be NULL). Since C ABI 0.5. */
smax_status smax_logit_scale_gradients(const smax_tensor* src, const smax_tensor* dsrc,
                                       const smax_softmax_options* options, double* dscale,
                                       double* dtemperature);

/* ==== sparse normalisers (include/smax/sparse.h) =============================
 * Backward passes take the saved output y; losses take class-index targets
 * (SMAX_DTYPE_I64) and write dst per smax_loss_options; loss backward passes
 * take dloss (dst's shape). dst may be exactly src, dsrc exactly dy (or src
 * for loss backward passes). */

/** sparsemax: y = [t - tau]_+, sum y = 1 (Martins & Astudillo 2016). */
smax_status smax_sparsemax(const smax_tensor* src, const smax_tensor* dst,
                           const smax_softmax_options* options);
/** dx_i = s (dy_i - mean_S dy) on the support S = {y > 0}, 0 elsewhere. */
smax_status smax_sparsemax_backward(const smax_tensor* y, const smax_tensor* dy,
                                    const smax_tensor* dsrc, const smax_softmax_options* options);
/** (1 - |p|^2)/2 + <p, t> - t_target, p = sparsemax(t). */
smax_status smax_sparsemax_loss(const smax_tensor* src, const smax_tensor* target,
                                const smax_tensor* dst, const smax_loss_options* loss,
                                const smax_softmax_options* options);
/** dsrc = c_r s (p - d_target). */
smax_status smax_sparsemax_loss_backward(const smax_tensor* src, const smax_tensor* target,
                                         const smax_tensor* dloss, const smax_tensor* dsrc,
                                         const smax_loss_options* loss,
                                         const smax_softmax_options* options);

/** 1.5-entmax (exact): y = [t/2 - tau]_+^2, sum y = 1 (Peters et al. 2019). */
smax_status smax_entmax15(const smax_tensor* src, const smax_tensor* dst,
                          const smax_softmax_options* options);
/** w = sqrt(y), dx = s w (dy - <dy, w>/sum w). */
smax_status smax_entmax15_backward(const smax_tensor* y, const smax_tensor* dy,
                                   const smax_tensor* dsrc, const smax_softmax_options* options);
/** (1 - sum p^1.5)/0.75 + <p, t> - t_target, p = entmax15(t). */
smax_status smax_entmax15_loss(const smax_tensor* src, const smax_tensor* target,
                               const smax_tensor* dst, const smax_loss_options* loss,
                               const smax_softmax_options* options);
smax_status smax_entmax15_loss_backward(const smax_tensor* src, const smax_tensor* target,
                                        const smax_tensor* dloss, const smax_tensor* dsrc,
                                        const smax_loss_options* loss,
                                        const smax_softmax_options* options);

/** alpha-entmax by bisection: y = [(alpha-1) t - tau]_+^(1/(alpha-1)). */
smax_status smax_entmax_bisect(const smax_tensor* src, const smax_tensor* dst,
                               const smax_entmax_bisect_options* params,
                               const smax_softmax_options* options);
/** w = y^(2-alpha), dx = s w (dy - <dy, w>/sum w); `dalpha` (optional, f32,
 *  per row) receives the alpha gradient. */
smax_status smax_entmax_bisect_backward(const smax_tensor* y, const smax_tensor* dy,
                                        const smax_tensor* dsrc, const smax_tensor* dalpha,
                                        const smax_entmax_bisect_options* params,
                                        const smax_softmax_options* options);
/** (1 - sum p^alpha)/(alpha (alpha-1)) + <p, t> - t_target. */
smax_status smax_entmax_bisect_loss(const smax_tensor* src, const smax_tensor* target,
                                    const smax_tensor* dst,
                                    const smax_entmax_bisect_options* params,
                                    const smax_loss_options* loss,
                                    const smax_softmax_options* options);
smax_status smax_entmax_bisect_loss_backward(const smax_tensor* src, const smax_tensor* target,
                                             const smax_tensor* dloss, const smax_tensor* dsrc,
                                             const smax_entmax_bisect_options* params,
                                             const smax_loss_options* loss,
                                             const smax_softmax_options* options);

/** Top-k softmax: softmax over the k largest logits (ties: lowest index),
 *  0 elsewhere; k >= 1 (k >= n: plain softmax). */
smax_status smax_sparse_softmax(const smax_tensor* src, const smax_tensor* dst, int64_t k,
                                const smax_softmax_options* options);
/** softmax_backward on the kept set. */
smax_status smax_sparse_softmax_backward(const smax_tensor* y, const smax_tensor* dy,
                                         const smax_tensor* dsrc,
                                         const smax_softmax_options* options);
/** log sum_{top k} exp(t) - t_target. */
smax_status smax_sparse_softmax_loss(const smax_tensor* src, const smax_tensor* target,
                                     const smax_tensor* dst, int64_t k,
                                     const smax_sparse_softmax_loss_options* params,
                                     const smax_loss_options* loss,
                                     const smax_softmax_options* options);
smax_status smax_sparse_softmax_loss_backward(const smax_tensor* src, const smax_tensor* target,
                                              const smax_tensor* dloss, const smax_tensor* dsrc,
                                              int64_t k,
                                              const smax_sparse_softmax_loss_options* params,
                                              const smax_loss_options* loss,
                                              const smax_softmax_options* options);

/* ==== rescaled and rectified softmaxes (include/smax/rescaled.h) ========== */

/** SSMax: y = softmax((s ln n) t) (Nakanishi 2025). */
smax_status smax_ssmax(const smax_tensor* src, const smax_tensor* dst,
                       const smax_ssmax_options* params, const smax_softmax_options* options);
/** dsrc = sigma c y (dy - <dy, y>); `ds` (optional, f32, per row) receives
 *  ln n * sum_i t_i y_i (dy_i - <dy, y>). */
smax_status smax_ssmax_backward(const smax_tensor* src, const smax_tensor* y,
                                const smax_tensor* dy, const smax_tensor* dsrc,
                                const smax_tensor* ds, const smax_ssmax_options* params,
                                const smax_softmax_options* options);
/** softpick: y = relu(e^t - 1) / (sum_visible |e^t - 1| + eps) (Zuhri et al. 2025). */
smax_status smax_softpick(const smax_tensor* src, const smax_tensor* dst,
                          const smax_softpick_options* params,
                          const smax_softmax_options* options);
/** VJP of softpick from the source. */
smax_status smax_softpick_backward(const smax_tensor* src, const smax_tensor* dy,
                                   const smax_tensor* dsrc, const smax_softpick_options* params,
                                   const smax_softmax_options* options);
/** Clipped softmax: y = clip((zeta - gamma) softmax(t) + gamma, 0, 1) (Bondarenko et al. 2023). */
smax_status smax_clipped_softmax(const smax_tensor* src, const smax_tensor* dst,
                                 const smax_clipped_softmax_options* params,
                                 const smax_softmax_options* options);
/** VJP of clipped softmax from the source. */
smax_status smax_clipped_softmax_backward(const smax_tensor* src, const smax_tensor* dy,
                                          const smax_tensor* dsrc,
                                          const smax_clipped_softmax_options* params,
                                          const smax_softmax_options* options);
/** StableMax: y = s(t)/sum s(t), s(x) = x + 1 (x >= 0), 1/(1 - x) (x < 0). */
smax_status smax_stablemax(const smax_tensor* src, const smax_tensor* dst,
                           const smax_softmax_options* options);
smax_status smax_stablemax_backward(const smax_tensor* src, const smax_tensor* dy,
                                    const smax_tensor* dsrc, const smax_softmax_options* options);
/** -log s(t_target) + log sum_j s(t_j). */
smax_status smax_stablemax_cross_entropy(const smax_tensor* src, const smax_tensor* target,
                                         const smax_tensor* dst, const smax_loss_options* loss,
                                         const smax_softmax_options* options);
smax_status smax_stablemax_cross_entropy_backward(const smax_tensor* src,
                                                  const smax_tensor* target,
                                                  const smax_tensor* dloss,
                                                  const smax_tensor* dsrc,
                                                  const smax_loss_options* loss,
                                                  const smax_softmax_options* options);
/** Fraction of rows whose softmax normaliser rounds to exactly 1 in
 *  `precision` (an smax_precision value) -> *fraction (may be NULL). `flags`
 *  (optional, f32, per row) receives 1 for a collapsed row, else 0. */
smax_status smax_softmax_collapse_fraction(const smax_tensor* src, const smax_tensor* flags,
                                           int32_t precision,
                                           const smax_softmax_options* options,
                                           double* fraction);

/* ==== re-weighting normalisers (include/smax/reweight.h) ================== */

/** SA-Softmax: y = r * softmax(t), r = t or (t - a)/(b - a). */
smax_status smax_self_adjust_softmax(const smax_tensor* src, const smax_tensor* dst,
                                     const smax_self_adjust_options* params,
                                     const smax_softmax_options* options);
smax_status smax_self_adjust_softmax_backward(const smax_tensor* src, const smax_tensor* dy,
                                              const smax_tensor* dsrc,
                                              const smax_self_adjust_options* params,
                                              const smax_softmax_options* options);
/** Sigmoid attention normaliser: y = sigmoid(t + b), b = -ln n by default. */
smax_status smax_sigmoid_normalizer(const smax_tensor* src, const smax_tensor* dst,
                                    const smax_sigmoid_normalizer_options* params,
                                    const smax_softmax_options* options);
/** dx = s dy y (1 - y) from the saved output y. */
smax_status smax_sigmoid_normalizer_backward(const smax_tensor* y, const smax_tensor* dy,
                                             const smax_tensor* dsrc,
                                             const smax_softmax_options* options);
/** Softplus normaliser (LSSA): softplus(lambda t) / sum softplus(lambda t). */
smax_status smax_softplus_normalizer(const smax_tensor* src, const smax_tensor* dst,
                                     const smax_softplus_normalizer_options* params,
                                     const smax_softmax_options* options);
smax_status smax_softplus_normalizer_backward(const smax_tensor* src, const smax_tensor* dy,
                                              const smax_tensor* dsrc,
                                              const smax_softplus_normalizer_options* params,
                                              const smax_softmax_options* options);
/** Power-Softmax: y = t^p / sum t^p, p even > 0 (default 2 in C++). */
smax_status smax_power_softmax(const smax_tensor* src, const smax_tensor* dst, int32_t p,
                               const smax_softmax_options* options);
smax_status smax_power_softmax_backward(const smax_tensor* src, const smax_tensor* dy,
                                        const smax_tensor* dsrc, int32_t p,
                                        const smax_softmax_options* options);
/** Probability-domain temperature: y = p^(1/T) / sum p^(1/T), T finite > 0. */
smax_status smax_probability_temperature(const smax_tensor* p_src, const smax_tensor* dst,
                                         float T, const smax_softmax_options* options);
smax_status smax_probability_temperature_backward(const smax_tensor* p_src,
                                                  const smax_tensor* dy,
                                                  const smax_tensor* dsrc, float T,
                                                  const smax_softmax_options* options);
/** Logit standardisation: softmax(((t - mean)/(std + eps)) / temperature). */
smax_status smax_logit_standardization(const smax_tensor* src, const smax_tensor* dst,
                                       const smax_logit_standardization_options* params,
                                       const smax_softmax_options* options);
smax_status smax_logit_standardization_backward(
    const smax_tensor* src, const smax_tensor* dy, const smax_tensor* dsrc,
    const smax_logit_standardization_options* params, const smax_softmax_options* options);

/* ==== sampling (include/smax/sampling.h) ====================================
 * Index outputs are SMAX_DTYPE_I64; per-row outputs have src's shape without
 * the axis (or with it of size 1); -1 means "no sample". Results depend only
 * on (seed, row, element): bitwise identical for any thread count. */

/** dst = Gumbel noise g(seed, r, i) with rows along `axis`. */
smax_status smax_gumbel_noise(const smax_tensor* dst, uint64_t seed, int64_t axis);
/** Gumbel-softmax: y = softmax((t + g)/tau); hard: one-hot at argmax(t + g). */
smax_status smax_gumbel_softmax(const smax_tensor* src, const smax_tensor* dst,
                                const smax_gumbel_softmax_options* params,
                                const smax_softmax_options* options);
/** dx = c y (dy - <dy, y>), c = scale / temperature / tau, from the soft sample. */
smax_status smax_gumbel_softmax_backward(const smax_tensor* y_soft, const smax_tensor* dy,
                                         const smax_tensor* dx, float tau,
                                         const smax_softmax_options* options);
/** indices[r] = argmax_i (t_i + g(seed, r, i)): an exact sample of softmax(t). */
smax_status smax_gumbel_max(const smax_tensor* src, const smax_tensor* indices, uint64_t seed,
                            const smax_softmax_options* options);
/** The k largest logits per row (descending, ties by lower index) with their
 *  softmax probabilities: probs f32 and indices i64, src's shape with the
 *  axis replaced by k; 0 <= k <= n. */
smax_status smax_softmax_topk(const smax_tensor* src, const smax_tensor* probs,
                              const smax_tensor* indices, int64_t k,
                              const smax_softmax_topk_options* params,
                              const smax_softmax_options* options);
/** The filtered, tempered logits `smax_sample` draws from (-inf elsewhere). */
smax_status smax_sampling_filter(const smax_tensor* src, const smax_tensor* dst,
                                 const smax_sample_options* params,
                                 const smax_softmax_options* options);
/** One sample per row (temperature -> top-k -> top-p, then Gumbel-max). */
smax_status smax_sample(const smax_tensor* src, const smax_tensor* indices,
                        const smax_sample_options* params, const smax_softmax_options* options);
/** Soft-NMS over boxes (f32 [N, 4]: x1, y1, x2, y2) and scores (f32 [N]).
 *  indices (i64 [N]) and kept_scores (f32 [N]) receive the kept boxes in
 *  selection order in their first *count entries (count may be NULL); the
 *  rest are set to -1 and 0. */
smax_status smax_soft_nms(const smax_tensor* boxes, const smax_tensor* scores,
                          const smax_tensor* indices, const smax_tensor* kept_scores,
                          const smax_soft_nms_options* params, int64_t* count);

/* ==== losses (include/smax/cross_entropy.h, linear_cross_entropy.h) ======= */

/** Cross-entropy from logits (PyTorch semantics plus label smoothing, z-loss,
 *  softcap and optional per-row outputs). `target`: i64 class indices or f32
 *  class probabilities (src's shape). */
smax_status smax_cross_entropy(const smax_tensor* src, const smax_tensor* target,
                               const smax_tensor* dst, const smax_cross_entropy_options* ce,
                               const smax_loss_options* loss,
                               const smax_softmax_options* options);
/** d loss / d src for the upstream gradient dloss (dst's shape). Reads
 *  ce->lse (the forward's) when given and label_smoothing == 0. */
smax_status smax_cross_entropy_backward(const smax_tensor* src, const smax_tensor* target,
                                        const smax_tensor* dloss, const smax_tensor* dsrc,
                                        const smax_cross_entropy_options* ce,
                                        const smax_loss_options* loss,
                                        const smax_softmax_options* options);
/** PaLM z-loss: coefficient * LSE(t)^2 per row. `target` NULL: every row
 *  counts with weight 1; else rows are weighted / ignored by the targets. */
smax_status smax_z_loss(const smax_tensor* src, const smax_tensor* target,
                        const smax_tensor* dst, float coefficient,
                        const smax_loss_options* loss, const smax_softmax_options* options);
smax_status smax_z_loss_backward(const smax_tensor* src, const smax_tensor* target,
                                 const smax_tensor* dloss, const smax_tensor* dsrc,
                                 float coefficient, const smax_loss_options* loss,
                                 const smax_softmax_options* options);
/** Spherical Z-loss (de Brebisson & Vincent 2016): softplus(a (b - z_y)) / a,
 *  z the standardised logits; a > 0, b finite. */
smax_status smax_spherical_z_loss(const smax_tensor* src, const smax_tensor* target,
                                  const smax_tensor* dst, float a, float b,
                                  const smax_loss_options* loss,
                                  const smax_softmax_options* options);
smax_status smax_spherical_z_loss_backward(const smax_tensor* src, const smax_tensor* target,
                                           const smax_tensor* dloss, const smax_tensor* dsrc,
                                           float a, float b, const smax_loss_options* loss,
                                           const smax_softmax_options* options);
/** Fused linear + cross-entropy: loss of z = hidden weight^T + bias
 *  (hidden [N, D], weight [V, D], bias [V] or NULL, target i64 [N]) without
 *  materialising z. */
smax_status smax_linear_cross_entropy(const smax_tensor* hidden, const smax_tensor* weight,
                                      const smax_tensor* target, const smax_tensor* bias,
                                      const smax_tensor* dst,
                                      const smax_cross_entropy_options* ce,
                                      const smax_linear_cross_entropy_options* lce,
                                      const smax_loss_options* loss,
                                      const smax_softmax_options* options);
/** Gradients dhidden [N, D], dweight [V, D] and dbias [V] (optional). */
smax_status smax_linear_cross_entropy_backward(
    const smax_tensor* hidden, const smax_tensor* weight, const smax_tensor* target,
    const smax_tensor* bias, const smax_tensor* dloss, const smax_tensor* dhidden,
    const smax_tensor* dweight, const smax_tensor* dbias, const smax_cross_entropy_options* ce,
    const smax_linear_cross_entropy_options* lce, const smax_loss_options* loss,
    const smax_softmax_options* options);
/** Loss and gradients in one call (every logit computed once). */
smax_status smax_linear_cross_entropy_fused(
    const smax_tensor* hidden, const smax_tensor* weight, const smax_tensor* target,
    const smax_tensor* bias, const smax_tensor* dst, const smax_tensor* dloss,
    const smax_tensor* dhidden, const smax_tensor* dweight, const smax_tensor* dbias,
    const smax_cross_entropy_options* ce, const smax_linear_cross_entropy_options* lce,
    const smax_loss_options* loss, const smax_softmax_options* options);

/* ==== errors ============================================================== */

/** Message of the most recent failed smax call on the calling thread, or ""
 *  when the most recent call succeeded (every call that returns a status
 *  resets it). The pointer stays valid until the next smax call on this
 *  thread. Never NULL. */
const char* smax_last_error(void);
/** "ok", "invalid argument", "unsupported", "out of memory", "internal error";
 *  "unknown status" for other values. Never NULL. */
const char* smax_status_name(smax_status status);

/* ==== runtime ============================================================= */

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
/** Whether large batched outputs are written with streaming (non-temporal)
 *  stores on this host, per kernel: "softmax=S, log_softmax=S, backward=S,
 *  cross_entropy=S" with S "stream" or "regular" once decided, "measuring"
 *  before; "forced on" / "forced off" when SMAX_STREAM_STORES or
 *  smax_set_streaming_stores() sets it (docs/design.md, "Streaming stores";
 *  the results are the same bits either way). The pointer stays valid until
 *  the next smax call on this thread. Since C ABI 0.7. */
const char* smax_streaming_stores(void);
/** Sets that choice for this process: "on", "off" or "auto" (back to the
 *  run-time measurement). Any other word, or NULL, gives
 *  SMAX_STATUS_INVALID_ARGUMENT and changes nothing. Not thread-safe
 *  against ops in flight. Since C ABI 0.7. */
smax_status smax_set_streaming_stores(const char* mode);
/** Library version, "MAJOR.MINOR.PATCH". */
const char* smax_version(void);

/* ==== attention (include/smax/attention.h) ===================================
 * Fused scaled dot-product attention with PyTorch SDPA semantics and a
 * pluggable row normaliser: q [B, H, Lq, D], k [B, Hkv, Lk, D],
 * v [B, Hkv, Lk, Dv], out [B, H, Lq, Dv] (any strides, H % Hkv == 0: GQA),
 *   out[b,h,i,:] = sum_j P[b,h,i,j] v[b,h/G,j,:],  P = normalizer(t),
 *   t = mask(alibi(softcap(fl(<q_i, k_j> * scale)))).
 * Error bounds, special values (NaN / +inf logit on a visible key -> NaN
 * row; masked -> exactly 0 weight and gradient; fully masked rows follow
 * empty_row), determinism (bitwise identical for any thread count) and
 * memory: include/smax/attention.h and docs/attention.md. Outputs may not
 * overlap any input or each other (SMAX_STATUS_INVALID_ARGUMENT). */

/** Row normaliser of the scores (smax::AttentionNormalizer). */
typedef enum smax_attention_normalizer {
  SMAX_ATTENTION_SOFTMAX = 0,   /**< exact softmax (online merge over key blocks) */
  SMAX_ATTENTION_SIGMOID = 1,   /**< sigmoid(t + b), b = sigmoid_bias or -ln n (sigmoid_bias_mode) */
  SMAX_ATTENTION_SOFTPICK = 2,  /**< relu(e^t - 1) / (sum |e^t - 1| + eps) */
  SMAX_ATTENTION_SSMAX = 3,     /**< softmax((s ln n) t), n = visible keys of the row */
  SMAX_ATTENTION_STABLEMAX = 4, /**< s(t) / sum s(t), s = t + 1 (t >= 0), 1 / (1 - t) */
  SMAX_ATTENTION_SOFTPLUS = 5,  /**< softplus(lambda t) / sum, lambda = ln(visible) / ln(D) */
  SMAX_ATTENTION_POWER = 6      /**< Power-Softmax t^p / sum t^p, p = power_p (C ABI 0.5) */
} smax_attention_normalizer;

/** n of SIGMOID's default bias b = -ln n (smax::SigmoidBiasMode; added in
 *  C ABI 0.2). 0 = the library's default (PER_SEQUENCE), so a zeroed field,
 *  and a struct of version 0.1 without it, get the default. */
typedef enum smax_sigmoid_bias_mode {
  SMAX_SIGMOID_BIAS_DEFAULT = 0,         /**< the library's default: PER_SEQUENCE */
  SMAX_SIGMOID_BIAS_PER_SEQUENCE = 1,    /**< n = Lk for every row (the paper's) */
  SMAX_SIGMOID_BIAS_PER_ROW_VISIBLE = 2  /**< n = visible keys of each query row (0.1's) */
} smax_sigmoid_bias_mode;

/** smax::AttentionOptions. NULL = the defaults below. */
typedef struct smax_attention_options {
  uint32_t struct_size;           /**< set by smax_attention_options_init */
  int32_t normalizer;             /**< an smax_attention_normalizer value (default SOFTMAX) */
  float scale;                    /**< multiplies <q, k>; NaN = 1/sqrt(D) (default NaN), else finite */
  int32_t is_causal;              /**< 0/1: mask j > i, top-left aligned (default 0) */
  const smax_tensor* attn_mask;   /**< bool (non-zero = attend) or f32 (added), broadcastable
                                       to [B, H, Lq, Lk]; NULL = none */
  float softcap;                  /**< > 0: t = softcap tanh(t / softcap); 0 = off (default 0) */
  const smax_tensor* sinks;       /**< f32 [H] sink logits (softmax only); NULL = none */
  const smax_tensor* alibi_slopes; /**< f32 [H] or [B, H]: adds -slope |i - j|; NULL = none */
  float sigmoid_bias;             /**< SIGMOID: b; NaN = -ln n, n per sigmoid_bias_mode
                                       (default NaN) */
  float softpick_eps;             /**< SOFTPICK: 0 or >= FLT_MIN (default 1e-6) */
  float ssmax_s;                  /**< SSMAX: s (default 0.43) */
  const smax_tensor* lse;         /**< out (smax_attention, softmax only): f32 [B, H, Lq],
                                       m + log d; ignored by the backward; NULL = none */
  int32_t empty_row;              /**< an smax_empty_row value for fully masked query rows
                                       (default ZERO: out 0, lse -inf, gradient 0) */
  int32_t threads;                /**< 0 = smax_max_threads(); results do not depend on it */
  /* ---- version 0.2: struct_size may stop here (80 bytes on LP64) ---- */
  int32_t sigmoid_bias_mode;      /**< an smax_sigmoid_bias_mode value for SIGMOID with
                                       sigmoid_bias NaN (default 0 = DEFAULT: b = -ln Lk) */
  int32_t reserved0;              /**< must be 0 (explicit padding: the tail of version 0.2) */
  /* ---- version 0.3: struct_size may stop here (88 bytes on LP64) ---- */
  const smax_tensor* cache_seqlens; /**< KV cache, forward only: i32 / i64 [B] valid keys of
                                       each sequence (<= Lk); the queries are the last Lq
                                       tokens (bottom-right causal); NULL = none */
  const smax_tensor* block_table; /**< paged KV cache, forward only: i32 / i64 [B, max_pages];
                                       k / v are then [num_pages, Hkv, page_size, D];
                                       NULL = none */
  const smax_tensor* gate;        /**< gated attention: out = sigmoid(gate) * attention; any
                                       floating dtype broadcast to [B, H, Lq, Dv] ([.., Dv]
                                       element-wise, [.., 1] head-wise); NULL = none */
  const smax_tensor* ungated_out; /**< with gate: smax_attention's optional output before
                                       the gate [B, H, Lq, Dv]; the backward's required
                                       input (that saved output); NULL = none */
  const smax_tensor* dgate;       /**< with gate: the backward's optional output, the
                                       gate's gradient (the gate's shape); NULL = none */
  const smax_tensor* dattn_mask;  /**< backward, optional: a floating attn_mask's gradient
                                       (its shape); NULL = none */
  const smax_tensor* dsinks;      /**< backward, optional: the sinks' gradient [H] */
  const smax_tensor* dalibi_slopes; /**< backward, optional: the slopes' gradient */
  const smax_tensor* dsigmoid_bias; /**< backward, optional (SIGMOID): the bias's gradient,
                                       one element ([] or [1]) */
  int32_t has_unified_max;        /**< 0/1: use unified_max (default 0 = off: all-zero
                                       bytes keep the previous behaviour) */
  float unified_max;              /**< with has_unified_max: the decode driver's
                                       FlashDecoding++ unified max phi (finite) */
  /* ---- version 0.4: struct_size may stop here (168 bytes on LP64) ---- */
  const smax_tensor* ssmax_scales; /**< SSMAX: any floating dtype [H], a per-head s
                                       (replaces ssmax_s); NULL = none */
  const smax_tensor* dssmax_scales; /**< backward, optional (SSMAX): the gradient with
                                       respect to s: [H] with ssmax_scales, else one
                                       element ([] or [1]) */
  /* ---- version 0.5: struct_size may stop here (184 bytes on LP64) ---- */
  int32_t power_p;                /**< POWER: the even power p >= 2; 0 = the default, 2 */
  int32_t reserved1;              /**< must be 0 (explicit padding: the tail of version 0.5) */
} smax_attention_options;
void smax_attention_options_init(smax_attention_options* options);

/** "softmax", "sigmoid", "softpick", "ssmax", "stablemax", "softplus", "power";
 *  "unknown" for other values. Never NULL (static storage). */
const char* smax_attention_normalizer_name(int32_t normalizer);
/** The smax_attention_normalizer value of one of the names above (exact,
 *  lower case) into *normalizer; SMAX_STATUS_INVALID_ARGUMENT (and
 *  *normalizer untouched) for other names or NULL pointers. */
smax_status smax_attention_normalizer_parse(const char* name, int32_t* normalizer);

/** Forward (smax::attention): writes out and, when params->lse is given, lse. */
smax_status smax_attention(const smax_tensor* q, const smax_tensor* k, const smax_tensor* v,
                           const smax_tensor* out, const smax_attention_options* params);
/** Backward (smax::attention_backward): from q, k, v, the saved forward
 *  output `out` and the upstream gradient dout [B, H, Lq, Dv], overwrites
 *  dq [B, H, Lq, D], dk [B, Hkv, Lk, D] and dv [B, Hkv, Lk, Dv] (P is
 *  recomputed; params->lse is ignored). Pass the forward's params. */
smax_status smax_attention_backward(const smax_tensor* q, const smax_tensor* k,
                                    const smax_tensor* v, const smax_tensor* out,
                                    const smax_tensor* dout, const smax_tensor* dq,
                                    const smax_tensor* dk, const smax_tensor* dv,
                                    const smax_attention_options* params);

/* ---- integer softmaxes: smax/c/quantized.h (part of this header) ---------- */
#include "smax/c/quantized.h"

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif /* SMAX_C_SMAX_H_ */
