#ifndef HEADWAY_CSQLITE_SHIM_H
#define HEADWAY_CSQLITE_SHIM_H

#include <sqlite3.h>

/// `SQLITE_TRANSIENT` is a macro with a cast and is not imported into Swift.
static inline sqlite3_destructor_type headway_sqlite_transient(void) {
    return SQLITE_TRANSIENT;
}

#endif
