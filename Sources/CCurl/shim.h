#ifndef HEADWAY_CCURL_SHIM_H
#define HEADWAY_CCURL_SHIM_H

// libcurl, the HTTP client of the `headway` command and of headwayd's webhook deliveries.
// `curl_easy_setopt`, `curl_easy_getinfo` and `curl_share_setopt` are variadic and not
// imported into Swift: these wrappers pass one typed argument each.
#include <curl/curl.h>
#include <sys/prctl.h>
#include <pty.h>

static inline CURLcode headway_curl_set_long(CURL *handle, CURLoption option, long value) {
    return curl_easy_setopt(handle, option, value);
}

static inline CURLcode headway_curl_set_string(CURL *handle, CURLoption option, const char *value) {
    return curl_easy_setopt(handle, option, value);
}

static inline CURLcode headway_curl_set_pointer(CURL *handle, CURLoption option, void *value) {
    return curl_easy_setopt(handle, option, value);
}

typedef size_t (*headway_curl_data_callback)(char *data, size_t size, size_t count, void *context);

static inline CURLcode headway_curl_set_callback(CURL *handle, CURLoption option, headway_curl_data_callback callback) {
    return curl_easy_setopt(handle, option, callback);
}

typedef int (*headway_curl_progress_callback)(void *context, curl_off_t download_total, curl_off_t download_now,
                                             curl_off_t upload_total, curl_off_t upload_now);

static inline CURLcode headway_curl_set_progress_callback(CURL *handle, headway_curl_progress_callback callback) {
    return curl_easy_setopt(handle, CURLOPT_XFERINFOFUNCTION, callback);
}

static inline CURLSHcode headway_curl_share_set_long(CURLSH *share, CURLSHoption option, long value) {
    return curl_share_setopt(share, option, value);
}

static inline CURLcode headway_curl_get_long(CURL *handle, CURLINFO info, long *value) {
    return curl_easy_getinfo(handle, info, value);
}

static inline CURLcode headway_curl_get_string(CURL *handle, CURLINFO info, char **value) {
    return curl_easy_getinfo(handle, info, value);
}

// `prctl` is variadic too. Not libcurl's, but this is the command line's only C shim: makes
// the process's /proc files (its environment among them) unreadable to other processes of
// the same user, its children included (they become dumpable again when they exec).
static inline int headway_forbid_inspection(void) {
    return prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
}

// `headway run --pty`: a pseudo-terminal pair of `rows` by `columns`, its leader in
// `*leader`, its follower in `*follower`; -1 with errno when it cannot. Here because Swift's
// Glibc module declares neither openpty (<pty.h>) nor posix_openpt (<stdlib.h> under
// _XOPEN_SOURCE only).
static inline int headway_open_pseudo_terminal(int *leader, int *follower, unsigned short rows, unsigned short columns) {
    struct winsize size = { .ws_row = rows, .ws_col = columns, .ws_xpixel = 0, .ws_ypixel = 0 };
    return openpty(leader, follower, NULL, NULL, &size);
}

#endif
