/* curl_floor.c — the floor of the sub-call figure (bench/llm.lua): N POSTs through a bare
 * libcurl multi handle driven the cheapest way (epoll and curl_multi_socket_action, as rlm's
 * loop does), at most C in flight, easy handles reused, nothing done with the answers. It is
 * what any libcurl client pays a request before doing any work of its own.
 *
 *   build/curl_floor URL N C ROUNDS    prints one line per round: CPU us per request, wall s */
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <time.h>

#include <curl/curl.h>

static const char BODY[] =
    "{\"model\":\"gpt-4o\",\"messages\":[{\"role\":\"user\",\"content\":\"p\"}]}";

static double seconds(clockid_t clock)
{
    struct timespec t;
    clock_gettime(clock, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static size_t discard(char *data, size_t size, size_t n, void *ud)
{
    return size * n;
}

static void start(CURLM *multi, CURL *easy, const char *url, struct curl_slist *headers)
{
    curl_easy_reset(easy);
    curl_easy_setopt(easy, CURLOPT_URL, url);
    curl_easy_setopt(easy, CURLOPT_POSTFIELDS, BODY);
    curl_easy_setopt(easy, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
    curl_multi_add_handle(multi, easy);
}

static int epoll_fd;
static double deadline = -1;   /* when curl wants its timeout action; -1: no timer */

static int on_socket(CURL *easy, curl_socket_t fd, int what, void *ud, void *socket_ud)
{
    if (what == CURL_POLL_REMOVE)
        return epoll_ctl(epoll_fd, EPOLL_CTL_DEL, fd, NULL), 0;
    struct epoll_event ev = {.data.fd = fd, .events = (what & CURL_POLL_IN ? EPOLLIN : 0) |
                                                      (what & CURL_POLL_OUT ? EPOLLOUT : 0)};
    if (epoll_ctl(epoll_fd, EPOLL_CTL_MOD, fd, &ev) != 0)
        epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev);
    return 0;
}

static int on_timer(CURLM *multi, long ms, void *ud)
{
    deadline = ms < 0 ? -1 : seconds(CLOCK_MONOTONIC) + ms / 1e3;
    return 0;
}

/* Waits for the sockets or the timer and lets curl act on what is ready. */
static void step(CURLM *multi)
{
    int running, wait_ms = 1000;
    if (deadline >= 0) {
        double left = (deadline - seconds(CLOCK_MONOTONIC)) * 1e3;
        wait_ms = left <= 0 ? 0 : left < 1000 ? (int)left + 1 : 1000;
    }
    struct epoll_event evs[64];
    int n = epoll_wait(epoll_fd, evs, 64, wait_ms);
    for (int i = 0; i < n; i++) {
        unsigned e = evs[i].events;
        curl_multi_socket_action(multi, evs[i].data.fd,
                                 (e & EPOLLIN ? CURL_CSELECT_IN : 0) |
                                     (e & EPOLLOUT ? CURL_CSELECT_OUT : 0) |
                                     (e & (EPOLLERR | EPOLLHUP) ? CURL_CSELECT_ERR : 0),
                                 &running);
    }
    if (deadline >= 0 && seconds(CLOCK_MONOTONIC) >= deadline) {
        deadline = -1;
        curl_multi_socket_action(multi, CURL_SOCKET_TIMEOUT, 0, &running);
    }
}

/* Runs n requests, at most c at once; returns how many did not answer 200. */
static int round_of(CURLM *multi, CURL **easies, int n, int c, const char *url,
                    struct curl_slist *headers)
{
    int sent = 0, done = 0, failed = 0;
    for (; sent < c && sent < n; sent++)
        start(multi, easies[sent], url, headers);
    while (done < n) {
        step(multi);
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(multi, &left)) != NULL) {
            if (msg->msg != CURLMSG_DONE)
                continue;
            long status = 0;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &status);
            failed += msg->data.result != CURLE_OK || status != 200;
            curl_multi_remove_handle(multi, msg->easy_handle);
            done++;
            if (sent < n)   /* the finished handle takes the next request */
                start(multi, msg->easy_handle, url, headers), sent++;
        }
    }
    return failed;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: curl_floor URL N CONCURRENCY ROUNDS\n");
        return 2;
    }
    const char *url = argv[1];
    int n = atoi(argv[2]), c = atoi(argv[3]), rounds = atoi(argv[4]);
    if (n < 1 || c < 1 || rounds < 1) {
        fprintf(stderr, "curl_floor: N, CONCURRENCY and ROUNDS must be positive\n");
        return 2;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    struct curl_slist *headers = curl_slist_append(NULL, "Content-Type: application/json");
    headers = curl_slist_append(headers, "Authorization: Bearer sk-bench");
    epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    CURLM *multi = curl_multi_init();
    curl_multi_setopt(multi, CURLMOPT_SOCKETFUNCTION, on_socket);
    curl_multi_setopt(multi, CURLMOPT_TIMERFUNCTION, on_timer);
    CURL **easies = calloc((size_t)c, sizeof *easies);
    for (int i = 0; easies && i < c; i++)
        easies[i] = curl_easy_init();
    for (int r = 0; easies && r < rounds; r++) {
        double cpu = seconds(CLOCK_PROCESS_CPUTIME_ID), wall = seconds(CLOCK_MONOTONIC);
        int failed = round_of(multi, easies, n, c, url, headers);
        if (failed) {
            fprintf(stderr, "curl_floor: %d of %d requests failed\n", failed, n);
            return 1;
        }
        printf("%.1f %.3f\n", (seconds(CLOCK_PROCESS_CPUTIME_ID) - cpu) / n * 1e6,
               seconds(CLOCK_MONOTONIC) - wall);
    }
    return easies ? 0 : 1;
}
