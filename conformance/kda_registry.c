/* kda_registry.c: built-in backends, loading plugins with dlopen, precision classes and caps.
 * SPDX-License-Identifier: MIT
 */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kda_conform.h"
#include "kda_dtype.h"

extern const kda_backend kda_backend_ref_f64;
extern const kda_backend kda_backend_ref_f32;
extern const kda_backend kda_backend_simd, kda_backend_simd_avx512, kda_backend_simd_avx2,
    kda_backend_simd_scalar; /* backends/simd/kda_simd.c */

/* The built-ins, and whether `kda conform` scores each when no backend is named; then those
 * a program added (kda_backend_builtin_add: the MPFR reference, a backend like any other but
 * far too slow for the default run). */
typedef struct builtin_row {
  const kda_backend *b;
  int is_default;
} builtin_row;
static const builtin_row builtins[] = {
    {&kda_backend_ref_f64, 1},      {&kda_backend_ref_f32, 1},  {&kda_backend_simd, 1},
    {&kda_backend_simd_avx512, 1}, {&kda_backend_simd_avx2, 1}, {&kda_backend_simd_scalar, 1},
};
#define N_FIXED ((int32_t)(sizeof builtins / sizeof builtins[0]))
static builtin_row added[KDA_BUILTIN_ADDED_MAX];
static int32_t n_added;

static const builtin_row *row(int32_t i) {
  if (i < 0 || i >= N_FIXED + n_added) return NULL;
  return i < N_FIXED ? &builtins[i] : &added[i - N_FIXED];
}

int32_t kda_backend_builtin_count(void) { return N_FIXED + n_added; }

const kda_backend *kda_backend_builtin(int32_t i) { return row(i) ? row(i)->b : NULL; }

int kda_backend_builtin_is_default(int32_t i) { return row(i) ? row(i)->is_default : 0; }

const kda_backend *kda_backend_find(const char *name) {
  for (int32_t i = 0; name && i < kda_backend_builtin_count(); i++)
    if (strcmp(row(i)->b->name, name) == 0) return row(i)->b;
  return NULL;
}

int kda_backend_builtin_add(const kda_backend *b, int is_default) {
  if (!b || !b->name || kda_backend_find(b->name)) return KDA_EINVAL;
  if (n_added == KDA_BUILTIN_ADDED_MAX) return KDA_ENOMEM;
  added[n_added].b = b;
  added[n_added].is_default = is_default;
  n_added++;
  return KDA_OK;
}

/* A plugin named NAME on KDA_PLUGIN_PATH: DIR/libkda_NAME.so, then DIR/NAME.so, in order;
 * empty entries are skipped (not the current directory: only a path names one there). */
static int plugin_search(const char *name, char *path, size_t cap) {
  const char *sp = getenv("KDA_PLUGIN_PATH");
  while (sp && *sp) {
    const char *colon = strchr(sp, ':');
    size_t n = colon ? (size_t)(colon - sp) : strlen(sp);
    const char *forms[2] = {"%.*s/libkda_%s.so", "%.*s/%s.so"};
    for (int f = 0; n > 0 && f < 2; f++) {
      int w = snprintf(path, cap, forms[f], (int)n, sp, name);
      if (w > 0 && (size_t)w < cap && access(path, R_OK) == 0) return 1;
    }
    sp = colon ? colon + 1 : NULL;
  }
  path[0] = 0;
  return 0;
}

/* A name searched for on KDA_PLUGIN_PATH: the characters of a backend name only, so that a
 * spec can never reach outside the search directories. */
static int search_name_ok(const char *s) {
  for (; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
          *s == '.' || *s == '_' || *s == '-'))
      return 0;
  return 1;
}

void kda_backend_ref_of(const kda_backend *b, const char *params, kda_backend_ref *out) {
  memset(out, 0, sizeof *out);
  out->builtin = b;
  snprintf(out->params, sizeof out->params, "%s", params ? params : "");
  snprintf(out->spec, sizeof out->spec, "%s", b->name ? b->name : "backend");
}

/* SPEC.md §7.8: the spec splits at its first ':' (a plugin path cannot hold one, as in
 * $PATH); the head is a built-in, a path, or a name on KDA_PLUGIN_PATH. */
int kda_backend_resolve(const char *spec, kda_backend_ref *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  if (!spec || !spec[0]) return snprintf(err, errlen, "empty backend name"), KDA_EINVAL;
  if (strlen(spec) >= sizeof out->spec)
    return snprintf(err, errlen, "backend spec '%.40s...' is too long (at most %zu bytes)", spec,
                    sizeof out->spec - 1),
           KDA_EINVAL;
  snprintf(out->spec, sizeof out->spec, "%s", spec);
  const char *colon = strchr(spec, ':');
  size_t n = colon ? (size_t)(colon - spec) : strlen(spec);
  if (n == 0) return snprintf(err, errlen, "'%.200s': no backend name before ':'", spec), KDA_EINVAL;
  char head[1024];
  memcpy(head, spec, n); /* n < sizeof out->spec == sizeof head; params fit likewise */
  head[n] = 0;
  snprintf(out->params, sizeof out->params, "%s", colon ? colon + 1 : "");
  int is_path = strchr(head, '/') || (n > 3 && strcmp(head + n - 3, ".so") == 0);
  if (!is_path) {
    if ((out->builtin = kda_backend_find(head))) return KDA_OK;
    if (!search_name_ok(head))
      return snprintf(err, errlen, "'%.200s': a backend name is [A-Za-z0-9._-]+", head),
             KDA_EINVAL;
    if (plugin_search(head, out->path, sizeof out->path)) return KDA_OK;
    snprintf(err, errlen,
             "unknown backend '%.200s' (not a built-in; no libkda_%.200s.so or %.200s.so on "
             "KDA_PLUGIN_PATH)", head, head, head);
    return KDA_ENOTFOUND;
  }
  /* "x.so" without a '/' is the file in the current directory, never a library that
   * dlopen would look for on the system's search path. */
  snprintf(out->path, sizeof out->path, "%s%s", strchr(head, '/') ? "" : "./", head);
  if (access(out->path, R_OK) != 0) {
    snprintf(err, errlen, "plugin '%.200s': no such readable file", out->path);
    out->path[0] = 0;
    return KDA_ENOTFOUND;
  }
  return KDA_OK;
}

static int valid_name(const char *s) {
  if (!s || !s[0] || strlen(s) > 63) return 0;
  for (; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '.' || *s == '_' ||
          *s == '-' || (*s >= 'A' && *s <= 'Z')))
      return 0;
  return 1;
}

/* SPEC.md §7.8: the version-2 slots of a table of ABI 2 or later.  The device-buffer slots
 * come as a set (a runner that creates buffers must be able to run, read and free them),
 * and a backend whose forward_buffers may return early must say when it has finished. */
static int validate_v2(const kda_backend *b, char *err, size_t errlen) {
  const int nbuf = !!b->buffers_create + !!b->forward_buffers + !!b->buffers_read +
                   !!b->buffers_destroy;
  if (nbuf != 0 && nbuf != 4)
    return snprintf(err, errlen,
                    "backend '%s' has %d of the 4 buffer functions (buffers_create, "
                    "forward_buffers, buffers_read, buffers_destroy: all or none)",
                    b->name, nbuf),
           KDA_EINVAL;
  if (nbuf == 4 && !b->synchronize)
    return snprintf(err, errlen, "backend '%s' has buffer functions but no synchronize",
                    b->name),
           KDA_EINVAL;
  /* the backward pair (appended after variant): both or neither, read only when present */
  if (KDA_BACKEND_HAS(b, backward) && !b->supports_backward != !b->backward)
    return snprintf(err, errlen, "backend '%s' has one of supports_backward and backward (both "
                    "or neither)", b->name),
           KDA_EINVAL;
  return KDA_OK;
}

/* A precision class and element types, of the table (params "") or of a variant. */
static int check_types(const char *name, const char *params, int32_t cls, int32_t in,
                       int32_t out, char *err, size_t errlen) {
  const char *sep = params && params[0] ? ":" : "";
  if (!params) params = "";
  if (!kda_precision_name(cls))
    return snprintf(err, errlen, "backend '%s%s%.200s' declares unknown precision class %d",
                    name, sep, params, (int)cls),
           KDA_EINVAL;
  if (!kda_dtype_valid(in) || !kda_dtype_valid(out))
    return snprintf(err, errlen, "backend '%s%s%.200s' declares an unknown buffer dtype "
                    "(input %d, output %d; fp64 fp32 bf16 fp16 are 0 1 3 4)",
                    name, sep, params, (int)in, (int)out),
           KDA_EINVAL;
  return KDA_OK;
}

int kda_backend_validate(const kda_backend *b, char *err, size_t errlen) {
  if (!b) return snprintf(err, errlen, "backend table is NULL"), KDA_EINVAL;
  if (b->abi_version < 1 || b->abi_version > KDA_BACKEND_ABI_VERSION) {
    snprintf(err, errlen, "backend ABI version %u is not supported (this runner: %d)",
             (unsigned)b->abi_version, KDA_BACKEND_ABI_VERSION);
    return KDA_EUNSUPPORTED;
  }
  /* The prefix the table's version promises; nothing past it is read (a version-1 table's
   * memory may end at its last version-1 slot). */
  const uint32_t need = b->abi_version >= 2 ? KDA_BACKEND_V2_SIZE : KDA_BACKEND_V1_SIZE;
  if (b->struct_size < need) {
    snprintf(err, errlen, "backend table size %u is smaller than the version-%u table (%u)",
             (unsigned)b->struct_size, (unsigned)b->abi_version, (unsigned)need);
    return KDA_EINVAL;
  }
  if (b->reserved0 != 0)
    return snprintf(err, errlen, "backend table's reserved0 is %d, not 0", (int)b->reserved0),
           KDA_EINVAL;
  if (!valid_name(b->name))
    return snprintf(err, errlen, "backend name is missing or not [A-Za-z0-9._-]{1,63}"),
           KDA_EINVAL;
  if (!b->open || !b->close || !b->supports || !b->forward || !b->last_error)
    return snprintf(err, errlen, "backend '%s' lacks a required function", b->name), KDA_EINVAL;
  int st = check_types(b->name, "", b->precision_class, b->input_dtype, b->output_dtype, err,
                       errlen);
  if (st != KDA_OK) return st;
  return b->abi_version >= 2 ? validate_v2(b, err, errlen) : KDA_OK;
}

/* ---- The variant slot (SPEC.md §7.8): the class and types of one parameter string. */
#define VARIANT_SLACK 64 /* canary bytes after the record: a write past struct_size is caught */

int kda_backend_variant_get(const kda_backend *b, const char *params, kda_backend_variant *v,
                            int *rejected, char *err, size_t errlen) {
  *rejected = 0;
  memset(v, 0, sizeof *v);
  v->struct_size = sizeof *v;
  v->precision_class = b->precision_class;
  v->input_dtype = b->input_dtype, v->output_dtype = b->output_dtype;
  if (!KDA_BACKEND_HAS(b, variant) || !b->variant) return KDA_OK;
  union {
    kda_backend_variant v;
    unsigned char c[sizeof(kda_backend_variant) + VARIANT_SLACK];
  } u;
  memset(u.c, 0xA5, sizeof u.c);
  u.v = *v;
  char msg[KDA_ERRLEN] = "";
  int32_t st = b->variant(params ? params : "", &u.v, msg, sizeof msg);
  msg[sizeof msg - 1] = 0;
  for (size_t i = sizeof u.v; i < sizeof u.c; i++)
    if (u.c[i] != 0xA5)
      return snprintf(err, errlen, "backend '%s': variant wrote past struct_size (%u bytes)",
                      b->name, (unsigned)sizeof u.v),
             KDA_EINVAL;
  if (st == KDA_EINVAL) {
    *rejected = 1;
    return snprintf(err, errlen, "backend '%s' rejects the parameters '%.200s': %.400s",
                    b->name, params ? params : "", msg[0] ? msg : "(no message)"),
           KDA_EINVAL;
  }
  if (st != KDA_OK)
    return snprintf(err, errlen, "backend '%s': variant('%.200s') returned %s: %.400s", b->name,
                    params ? params : "", kda_strstatus(st), msg),
           st;
  if (u.v.struct_size != sizeof u.v || u.v.reserved0 != 0)
    return snprintf(err, errlen, "backend '%s': variant changed struct_size or reserved0",
                    b->name),
           KDA_EINVAL;
  st = check_types(b->name, params, u.v.precision_class, u.v.input_dtype, u.v.output_dtype, err,
                   errlen);
  if (st == KDA_OK) *v = u.v;
  return st;
}

struct kda_plugin {
  void *dl;
};

int kda_plugin_load(const char *path, kda_plugin **out, const kda_backend **backend, char *err,
                    size_t errlen) {
  *out = NULL;
  *backend = NULL;
  kda_plugin *p = calloc(1, sizeof *p);
  if (!p) return snprintf(err, errlen, "%s: out of memory", path), KDA_ENOMEM;
  p->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!p->dl) {
    snprintf(err, errlen, "%s: cannot load plugin: %s", path, dlerror());
    free(p);
    return KDA_EIO;
  }
  kda_backend_entry_fn entry;
  void *sym = dlsym(p->dl, KDA_BACKEND_ENTRY_SYMBOL);
  memcpy(&entry, &sym, sizeof entry); /* object-to-function pointer, as POSIX allows */
  const kda_backend *b = sym ? entry(KDA_BACKEND_ABI_VERSION) : NULL;
  int st = KDA_ENOTFOUND;
  char why[KDA_ERRLEN] = "";
  if (!sym)
    snprintf(why, sizeof why, "no symbol '%s'", KDA_BACKEND_ENTRY_SYMBOL);
  else if (!b)
    snprintf(why, sizeof why, "%s(%d) returned NULL", KDA_BACKEND_ENTRY_SYMBOL,
             KDA_BACKEND_ABI_VERSION);
  else
    st = kda_backend_validate(b, why, sizeof why);
  if (st != KDA_OK) {
    snprintf(err, errlen, "%s: %s", path, why);
    dlclose(p->dl);
    free(p);
    return st;
  }
  *out = p;
  *backend = b;
  return KDA_OK;
}

void kda_plugin_unload(kda_plugin *p) {
  if (!p) return;
  dlclose(p->dl);
  free(p);
}

/* ---- Precision classes: unit roundoff and caps (SPEC.md §7.2, §7.4). */
typedef struct class_row {
  double unit; /* unit roundoff u */
  double tiny; /* smallest positive subnormal of the class's output format (§7.3 floor) */
  kda_caps caps;
} class_row;

/* Indexed by KDA_PRECISION_*; the names are kda_precision_name's (SPEC.md §10.3). */
static const class_row class_table[KDA_PRECISION_COUNT] = {
    /* fp64 */ {0x1p-53, 0x1p-1074, {64.0, 64.0, 64.0}},
    /* fp32 */ {0x1p-24, 0x1p-149, {64.0, 64.0, 64.0}},
    /* tf32 */ {0x1p-11, 0x1p-149, {32.0, 32.0, 32.0}},
    /* bf16 */ {0x1p-8, 0x1p-133, {8.0, 4.0, 4.0}},
    /* fp16 */ {0x1p-11, 0x1p-24, {16.0, 16.0, 16.0}},
};

double kda_class_unit(int32_t cls) {
  return kda_precision_name(cls) ? class_table[cls].unit : 0.0;
}

double kda_class_tiny(int32_t cls) {
  return kda_precision_name(cls) ? class_table[cls].tiny : 0.0;
}

int kda_class_caps(int32_t cls, kda_caps *caps) {
  if (!kda_precision_name(cls)) return KDA_EINVAL;
  *caps = class_table[cls].caps;
  return KDA_OK;
}
