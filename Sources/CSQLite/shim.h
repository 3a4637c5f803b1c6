#ifndef MTLS_CSQLITE_SHIM_H
#define MTLS_CSQLITE_SHIM_H
#include <sqlite3.h>

/* SQLITE_TRANSIENT is a cast macro the Swift importer cannot see. */
static inline sqlite3_destructor_type mtls_sqlite_transient(void) { return SQLITE_TRANSIENT; }
static inline sqlite3_destructor_type mtls_sqlite_static(void) { return SQLITE_STATIC; }

/* The store file's atomic creation (CredentialStore+File.swift): rename(2) that fails with
 * EEXIST instead of replacing `to` (renameat2 with RENAME_NOREPLACE, which Swift's Glibc module
 * does not declare). -1 with errno EINVAL or ENOSYS where the kernel or file system lacks it. */
#include <errno.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>
static inline int mtls_rename_noreplace(const char *from, const char *to) {
#ifdef SYS_renameat2
    return (int)syscall(SYS_renameat2, AT_FDCWD, from, AT_FDCWD, to, 1u /* RENAME_NOREPLACE */);
#else
    errno = ENOSYS;
    return -1;
#endif
}
#endif
