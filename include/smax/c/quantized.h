/* include/smax/c/quantized.h: the C ABI of the integer softmaxes
 * (smax/quantized.h; docs/quantized.md): I-BERT's int_softmax, I-ViT's
 * Shiftmax and ORT's QLinearSoftmax. A part of <smax/c/smax.h>, which
 * includes it inside its extern "C" block after the types it uses
 * (smax_tensor, smax_status): include <smax/c/smax.h>, not this file. */
#ifndef SMAX_C_QUANTIZED_H_
#define SMAX_C_QUANTIZED_H_

#ifndef SMAX_C_SMAX_H_
#error "include <smax/c/smax.h>, not <smax/c/quantized.h>"
#endif

/** smax::QuantizedOptions: what the integer softmaxes share. */
typedef struct smax_quantized_options {
  uint32_t struct_size;
  int64_t axis;    /**< reduced dim; negative counts from the end (default -1) */
  int32_t threads; /**< 0 = default; results do not depend on it */
} smax_quantized_options;
void smax_quantized_options_init(smax_quantized_options* options);

/** smax::IntSoftmaxOptions (I-BERT). */
typedef struct smax_int_softmax_options {
  uint32_t struct_size;
  float scaling_factor; /**< finite, > 0, 1 <= floor(c / s^2) <= 2^48 (default 1/64) */
  int32_t output_bit;   /**< 1 ... 30 (default 8) */
} smax_int_softmax_options;
void smax_int_softmax_options_init(smax_int_softmax_options* options);

/** smax::ShiftmaxOptions (I-ViT). */
typedef struct smax_shiftmax_options {
  uint32_t struct_size;
  float scaling_factor; /**< finite, >= 2^-16 (default 1/64) */
  int32_t output_bit;   /**< 1 ... 31 (default 8) */
} smax_shiftmax_options;
void smax_shiftmax_options_init(smax_shiftmax_options* options);

/** smax::QLinearSoftmaxOptions (ORT com.microsoft QLinearSoftmax). */
typedef struct smax_qlinear_softmax_options {
  uint32_t struct_size;
  float x_scale;           /**< finite, > 0 (default 1/16) */
  int32_t x_zero_point;    /**< in the dtype's range (default 0) */
  float y_scale;           /**< finite, > 0 (default 1/256) */
  int32_t y_zero_point;    /**< in the dtype's range (default 0) */
  int32_t bias_correction; /**< 0 or 1 (default 0: ORT's bits) */
} smax_qlinear_softmax_options;
void smax_qlinear_softmax_options_init(smax_qlinear_softmax_options* options);

/** I-BERT integer softmax: src and dst SMAX_DTYPE_I32. NULL params / options: defaults. */
smax_status smax_int_softmax(const smax_tensor* src, const smax_tensor* dst,
                             const smax_int_softmax_options* params,
                             const smax_quantized_options* options);
/** I-ViT Shiftmax: src and dst SMAX_DTYPE_I32. */
smax_status smax_shiftmax(const smax_tensor* src, const smax_tensor* dst,
                          const smax_shiftmax_options* params,
                          const smax_quantized_options* options);
/** ORT QLinearSoftmax: src SMAX_DTYPE_U8 or SMAX_DTYPE_I8, dst the same dtype. */
smax_status smax_qlinear_softmax(const smax_tensor* src, const smax_tensor* dst,
                                 const smax_qlinear_softmax_options* params,
                                 const smax_quantized_options* options);

#endif /* SMAX_C_QUANTIZED_H_ */
