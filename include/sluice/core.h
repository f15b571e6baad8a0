/* sluice — status codes, error messages, logging and version.
 *
 * Every fallible function of sluice returns an sl_status; SL_OK is 0. When a
 * call fails, sl_last_error() gives a detailed, human-readable message for
 * the calling thread ("placement 'cpu:3-1': range end before start"). */
#ifndef SLUICE_CORE_H
#define SLUICE_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sluice/export.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes. Append-only: values never change meaning between releases. */
typedef enum sl_status {
  SL_OK = 0,
  SL_EINVAL = 1,       /* malformed or out-of-range argument */
  SL_ENOMEM = 2,       /* allocation failed */
  SL_EUNSUPPORTED = 3, /* valid request this build or device cannot do */
  SL_ESTATE = 4,       /* call not allowed in the object's current state */
  SL_EIO = 5,          /* file or stream error */
  SL_EINTERNAL = 6,    /* a broken invariant inside sluice (a bug) */
  SL_ETIMEOUT = 7,     /* a deadline passed */
  SL_EABORTED = 8,     /* stopped because another part failed */
  SL_EHANG = 9,        /* no progress possible: reported, not waited on */
  SL_EMISMATCH = 10,   /* a verification found different values */
  SL_ECOMM = 11,       /* a peer or connection failed */
  SL_EAUTH = 12,       /* authentication refused */
  SL_ECUDA = 13,       /* a CUDA runtime or driver error */
  SL_ENCCL = 14,       /* an NCCL error */
  SL_ENOTFOUND = 15,   /* a named thing does not exist */
} sl_status;

/* The enum name of a status ("SL_EINVAL"); "SL_E?" for unknown values. */
SL_API const char *sl_status_str(sl_status st);

/* The calling thread's message for the last failure, "" if none. The string
 * stays valid until the thread's next sluice call that fails. */
SL_API const char *sl_last_error(void);

/* Forgets the calling thread's last error message. */
SL_API void sl_clear_error(void);

/* For code built on sluice that reports its failures the way sluice does
 * (a model builder, a data loader): sl_set_error records a message as the
 * calling thread's last error, sl_add_error_context puts context in front
 * of the last one ("step 3: "); both return st. */
#if defined(__GNUC__) || defined(__clang__)
#define SL_PRINTF_LIKE(f, a) __attribute__((format(printf, f, a)))
#else
#define SL_PRINTF_LIKE(f, a)
#endif
SL_API sl_status sl_set_error(sl_status st, const char *fmt, ...)
    SL_PRINTF_LIKE(2, 3);
SL_API sl_status sl_add_error_context(sl_status st, const char *fmt, ...)
    SL_PRINTF_LIKE(2, 3);

typedef enum sl_logging_level {
  SL_LOGGING_DEBUG = 0,
  SL_LOGGING_INFO = 1,
  SL_LOGGING_WARN = 2,
  SL_LOGGING_ERROR = 3,
  SL_LOGGING_OFF = 4,
} sl_logging_level;

/* The process-wide log threshold. It starts from SLUICE_LOG
 * (debug|info|warn|error|off; default warn). Messages go to stderr. */
SL_API void sl_logging_set_level(sl_logging_level level);
SL_API sl_logging_level sl_logging_get_level(void);

/* Parses "debug", "info", "warn", "error" or "off". SL_EINVAL otherwise. */
SL_API sl_status sl_logging_level_parse(const char *text,
                                        sl_logging_level *out);

/* The library version, "MAJOR.MINOR.PATCH". */
SL_API const char *sl_version(void);

#ifdef __cplusplus
}
#endif
#endif
