/* kda_precision.h: the one vocabulary of precisions (SPEC.md §7.2, §10.3).
 * SPDX-License-Identifier: MIT
 *
 * One enum serves every place that names a precision: the precision class a backend claims
 * and is scored in (kda_backend.h's precision_class), the element type of a backend's float
 * buffers (input_dtype / output_dtype: fp64, fp32, bf16 or fp16), and the precision a case's
 * inputs are exact in (kda_case's input_precision).  The values are the backend ABI's and
 * never change.
 *
 * Every precision has two spellings (SPEC.md §10.3): the canonical name ("fp32"), used by
 * reports and `kda conform --class`, and the file spelling ("f32"), the one manifests,
 * golden sets and `kda gen prec=` have always stored.  Writers write the file spelling into
 * files (committed golden data depends on it byte for byte); kda_precision_parse accepts
 * both.  tf32 is a class only: inputs cannot be exact "in tf32" beyond float32, so it has no
 * file spelling and is no case's input precision.
 *
 * The npz element types (KDA_DTYPE_* of kda_npz.h: f8 f4 f2 i8 i4) are storage types, not
 * precisions: a bf16 case stores its values as f4.
 */
#ifndef KDA_PRECISION_H
#define KDA_PRECISION_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KDA_PRECISION_FP64 0 /* float64 everywhere (u = 2^-53) */
#define KDA_PRECISION_FP32 1 /* float32 inputs, state, arithmetic and outputs (u = 2^-24) */
#define KDA_PRECISION_TF32 2 /* float32 storage, products with 10-bit fractions (u = 2^-11) */
#define KDA_PRECISION_BF16 3 /* bfloat16 inputs and outputs, float32 state (u = 2^-8) */
#define KDA_PRECISION_FP16 4 /* binary16 inputs and outputs, float32 state (u = 2^-11) */
#define KDA_PRECISION_COUNT 5

/* The canonical name: "fp64" "fp32" "tf32" "bf16" "fp16", or NULL when prec is invalid. */
const char *kda_precision_name(int32_t prec);

/* The file spelling that manifests store: "f64" "f32" "bf16" "f16"; NULL for tf32 (no
 * file spelling: not an input precision) and for an invalid prec. */
const char *kda_precision_file_name(int32_t prec);

/* Parses either spelling ("fp32" or "f32").  Returns KDA_OK and sets *prec (when prec is
 * not NULL), or KDA_EINVAL for NULL or an unknown name. */
int kda_precision_parse(const char *name, int32_t *prec);

#ifdef __cplusplus
}
#endif
#endif
