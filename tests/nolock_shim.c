/* LD_PRELOAD shim for tests/test_filesystems.py: a filesystem that refuses locks, as NFS without lockd and
 * some Lustre/GPFS mounts do. flock(), lockf() and fcntl()'s lock commands fail with ENOLCK on every file
 * under $NOLOCK_PREFIX (every file when it is unset or empty); everything else goes to libc.
 *
 *   cc -shared -fPIC -o nolock.so nolock_shim.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

static int refused(int fd) {
    const char *prefix = getenv("NOLOCK_PREFIX");
    if (prefix == NULL || prefix[0] == '\0')
        return 1;
    char link[64], path[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n < 0)
        return 0;
    path[n] = '\0';
    return strncmp(path, prefix, strlen(prefix)) == 0;
}

static int is_lock_command(int cmd) {
    switch (cmd) {
    case F_GETLK: case F_SETLK: case F_SETLKW:
#ifdef F_OFD_SETLK
    case F_OFD_GETLK: case F_OFD_SETLK: case F_OFD_SETLKW:
#endif
        return 1;
    default:
        return 0;
    }
}

int flock(int fd, int operation) {
    static int (*real)(int, int);
    if (refused(fd)) {
        errno = ENOLCK;
        return -1;
    }
    if (!real)
        real = (int (*)(int, int))dlsym(RTLD_NEXT, "flock");
    return real(fd, operation);
}

static int fcntl_via(const char *symbol, int fd, int cmd, void *arg) {
    if (is_lock_command(cmd) && refused(fd)) {
        errno = ENOLCK;
        return -1;
    }
    int (*real)(int, int, ...) = (int (*)(int, int, ...))dlsym(RTLD_NEXT, symbol);
    return real(fd, cmd, arg);
}

/* every fcntl command takes at most one argument, an int or a pointer: passed on as a pointer-sized word */
int fcntl(int fd, int cmd, ...) {
    va_list ap;
    va_start(ap, cmd);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    return fcntl_via("fcntl", fd, cmd, arg);
}

int fcntl64(int fd, int cmd, ...) {
    va_list ap;
    va_start(ap, cmd);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    return fcntl_via("fcntl64", fd, cmd, arg);
}

static int lockf_via(const char *symbol, int fd, int cmd, off_t len) {
    if (cmd != F_ULOCK && refused(fd)) {
        errno = ENOLCK;
        return -1;
    }
    int (*real)(int, int, off_t) = (int (*)(int, int, off_t))dlsym(RTLD_NEXT, symbol);
    return real(fd, cmd, len);
}

int lockf(int fd, int cmd, off_t len) { return lockf_via("lockf", fd, cmd, len); }
int lockf64(int fd, int cmd, off_t len) { return lockf_via("lockf64", fd, cmd, len); }
