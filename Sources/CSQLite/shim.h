#ifndef MTLS_CSQLITE_SHIM_H
#define MTLS_CSQLITE_SHIM_H
#include <sqlite3.h>

/* SQLITE_TRANSIENT is a cast macro the Swift importer cannot see. */
static inline sqlite3_destructor_type mtls_sqlite_transient(void) { return SQLITE_TRANSIENT; }
static inline sqlite3_destructor_type mtls_sqlite_static(void) { return SQLITE_STATIC; }
#endif
