#ifndef HEADWAY_CSQLITE_SHIM_H
#define HEADWAY_CSQLITE_SHIM_H

#include <sqlite3.h>

/// `SQLITE_TRANSIENT` is a macro with a cast and is not imported into Swift.
static inline sqlite3_destructor_type headway_sqlite_transient(void) {
    return SQLITE_TRANSIENT;
}

/// Turns off SQLite's count of the memory it uses (`sqlite3_config` is variadic, which
/// Swift cannot call). Debian builds SQLite without lookaside memory, so a statement
/// allocates a dozen times a run, and each allocation took a global mutex to keep that
/// count. Works only before SQLite initializes (`SQLITE_MISUSE` after).
static inline int headway_sqlite_stop_counting_memory(void) {
    return sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}

#endif
