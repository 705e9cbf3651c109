/*
 * A wall clock a test can step: preloaded (LD_PRELOAD) into a process, it moves every
 * reading of the wall clock (CLOCK_REALTIME and its variants, gettimeofday, time,
 * timespec_get) by what the file ATOMFLAKE_STEPPED_CLOCK names says, read again at every
 * call. The monotonic clocks keep real time, so timeouts and sleeps do too.
 *
 * The file's first 8 bytes are one int64 in host order: (value << 1) | stopped. Not
 * stopped: the value is an offset in ns added to the real time. Stopped: the value is the
 * time in ns since 1970 that every reading returns. The test rewrites the word in place
 * (one 8-byte write): the mapping sees it at the next reading.
 *
 * A reading makes no call but the real clock's and one load from the mapping: no lock, no
 * allocation, no file opened. So a signal handler that reads the clock (PostgreSQL's
 * timeout handler does) cannot deadlock on a lock the code it interrupted holds, as it can
 * with libfaketime's FAKETIME_NO_CACHE, which opens its file at every reading.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static const volatile int64_t *word;

/* Maps the file when the library is loaded, before the program's main. */
__attribute__((constructor)) static void map_the_file(void) {
    const char *path = getenv("ATOMFLAKE_STEPPED_CLOCK");
    int fd = path ? open(path, O_RDONLY | O_CLOEXEC) : -1;
    if (fd < 0) {
        return;
    }
    void *mapped = mmap(NULL, sizeof(int64_t), PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (mapped != MAP_FAILED) {
        word = mapped;
    }
}

static int moves(clockid_t clock) {
    return clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE || clock == CLOCK_TAI;
}

int clock_gettime(clockid_t clock, struct timespec *ts) {
    /* The system call itself: no symbol lookup, fit for any moment. */
    if (syscall(SYS_clock_gettime, clock, ts) != 0) {
        return -1;
    }
    if (word == NULL || !moves(clock)) {
        return 0;
    }
    int64_t value = __atomic_load_n(word, __ATOMIC_RELAXED);
    int64_t ns = value >> 1;
    if ((value & 1) == 0) {
        ns += (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec;
    }
    ts->tv_sec = ns / 1000000000;
    ts->tv_nsec = ns % 1000000000;
    if (ts->tv_nsec < 0) {
        ts->tv_nsec += 1000000000;
        ts->tv_sec -= 1;
    }
    return 0;
}

int gettimeofday(struct timeval *tv, void *tz) {
    (void)tz;
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) {
        return -1;
    }
    if (tv != NULL) {
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    return 0;
}

time_t time(time_t *t) {
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) {
        return (time_t)-1;
    }
    if (t != NULL) {
        *t = ts.tv_sec;
    }
    return ts.tv_sec;
}

int timespec_get(struct timespec *ts, int base) {
    return base == TIME_UTC && clock_gettime(CLOCK_REALTIME, ts) == 0 ? base : 0;
}
