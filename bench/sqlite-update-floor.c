/*
 * What SQLite alone costs to apply one progress update to a task row: the UPDATE that
 * TaskRepository.update writes for an increment with a label (the columns such an update
 * changes, by id), run N times over 200 tasks of a database headwayd made, 9,600 to a
 * transaction (a batch of figure 3r's size), synchronous=NORMAL so that no fsync is
 * counted. Prints the process's CPU time per UPDATE; run it under callgrind for the
 * instructions. The floor under a batch item's cost in headwayd (bench/sqlite-update-floor.sh).
 *
 *   cc -O2 -o sqlite-update-floor bench/sqlite-update-floor.c -lsqlite3
 *   ./sqlite-update-floor DATABASE [COUNT]
 */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

static double cpu_microseconds(void) {
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    return (usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1e6 + usage.ru_utime.tv_usec + usage.ru_stime.tv_usec;
}

static void run(sqlite3 *db, const char *sql) {
    char *error = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &error) != SQLITE_OK) {
        fprintf(stderr, "%s: %s\n", sql, error);
        exit(1);
    }
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s DATABASE [COUNT]\n", argv[0]);
        return 2;
    }
    int count = argc > 2 ? atoi(argv[2]) : 200000;
    sqlite3 *db;
    sqlite3_stmt *update;
    if (sqlite3_open_v2(argv[1], &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
        fprintf(stderr, "%s: %s\n", argv[1], sqlite3_errmsg(db));
        return 1;
    }
    run(db, "PRAGMA journal_mode = WAL");
    run(db, "PRAGMA synchronous = NORMAL");
    const char *sql =
        "UPDATE tasks SET label = ?1, completed = completed + 1, updated_at = ?2, last_signal_at = ?2, "
        "last_progress_at = ?2, change_seq = ?3, stall_deadline = ?2 + 300000, rate_units = ?4, "
        "rate_seconds = ?4, sample_at = ?2, sample_value = ?4 WHERE id = ?5";
    if (sqlite3_prepare_v2(db, sql, -1, &update, NULL) != SQLITE_OK) {
        fprintf(stderr, "prepare: %s\n", sqlite3_errmsg(db));
        return 1;
    }
    sqlite3_int64 change = 1000000000;
    char id[32];
    double start = cpu_microseconds();
    for (int i = 0; i < count; i++) {
        if (i % 9600 == 0) {
            if (i > 0) run(db, "COMMIT");
            run(db, "BEGIN IMMEDIATE");
        }
        snprintf(id, sizeof id, "bench-%d", i % 200);
        sqlite3_bind_text(update, 1, "Copying photos to archive volume 3 (batch 000001)", -1, SQLITE_STATIC);
        sqlite3_bind_int64(update, 2, 1764650000000LL + i);
        sqlite3_bind_int64(update, 3, ++change);
        sqlite3_bind_double(update, 4, 1.5 + i);
        sqlite3_bind_text(update, 5, id, -1, SQLITE_STATIC);
        if (sqlite3_step(update) != SQLITE_DONE || sqlite3_changes(db) != 1) {
            fprintf(stderr, "update %s: %s\n", id, sqlite3_errmsg(db));
            return 1;
        }
        sqlite3_reset(update);
    }
    run(db, "COMMIT");
    printf("updates=%d cpu_us_per_update=%.2f\n", count, (cpu_microseconds() - start) / count);
    sqlite3_finalize(update);
    sqlite3_close(db);
    return 0;
}
