/* Symbol visibility for packd's shared libraries. The build compiles with
 * -fvisibility=hidden and defines PK_BUILDING_LIBRARY; only declarations
 * marked PK_EXPORT are visible to users of libpackd. */
#ifndef PK_EXPORT_H
#define PK_EXPORT_H

#if defined(__GNUC__)
#define PK_EXPORT __attribute__((visibility("default")))
#else
#define PK_EXPORT
#endif

#endif
