/* sluice — symbol visibility. Only SL_API symbols leave the shared library. */
#ifndef SLUICE_EXPORT_H
#define SLUICE_EXPORT_H

#if defined(SLUICE_STATIC)
#define SL_API
#elif defined(_WIN32)
#ifdef SLUICE_BUILDING
#define SL_API __declspec(dllexport)
#else
#define SL_API __declspec(dllimport)
#endif
#else
#define SL_API __attribute__((visibility("default")))
#endif

#endif
