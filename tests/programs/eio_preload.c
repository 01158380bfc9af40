/* A client whose writes of one checkpoint fail with EIO, for tests/faults/test_write_error_lost_by_mpiio.py.

   Preloaded (LD_PRELOAD) into every rank; it does nothing until a rank sets CKPTIO_TEST_EIO_UNDER to a directory
   ("/path/to/dir/"): from then on that rank's writes (pwrite, pwritev, pwritev2, write, writev) of any file under
   that directory whose path holds "ckptio-tmp" (a checkpoint being written) fail with EIO before reaching the
   kernel, as a node's I/O error would. Files elsewhere (Open MPI's shared-memory files, stdout) are untouched.

   cc -shared -fPIC -O2 -o libeio_preload.so eio_preload.c -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

static int fails(int fd) {
    const char *under = getenv("CKPTIO_TEST_EIO_UNDER");
    if (!under || !*under) return 0;
    char link[64], path[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n <= 0) return 0;
    path[n] = 0;
    return strncmp(path, under, strlen(under)) == 0 && strstr(path, "ckptio-tmp") != NULL;
}
ssize_t pwrite64(int fd, const void *buf, size_t count, off_t offset) {
    static ssize_t (*real)(int, const void *, size_t, off_t);
    if (!real) real = dlsym(RTLD_NEXT, "pwrite64");
    if (fails(fd)) { errno = EIO; return -1; }
    return real(fd, buf, count, offset);
}
ssize_t pwrite(int fd, const void *buf, size_t count, off_t offset) { return pwrite64(fd, buf, count, offset); }
ssize_t pwritev(int fd, const struct iovec *iov, int n, off_t offset) {
    static ssize_t (*real)(int, const struct iovec *, int, off_t);
    if (!real) real = dlsym(RTLD_NEXT, "pwritev");
    if (fails(fd)) { errno = EIO; return -1; }
    return real(fd, iov, n, offset);
}
ssize_t pwritev64(int fd, const struct iovec *iov, int n, off_t offset) { return pwritev(fd, iov, n, offset); }
ssize_t write(int fd, const void *buf, size_t count) {
    static ssize_t (*real)(int, const void *, size_t);
    if (!real) real = dlsym(RTLD_NEXT, "write");
    if (fd > 2 && fails(fd)) { errno = EIO; return -1; }
    return real(fd, buf, count);
}
ssize_t writev(int fd, const struct iovec *iov, int n) {
    static ssize_t (*real)(int, const struct iovec *, int);
    if (!real) real = dlsym(RTLD_NEXT, "writev");
    if (fd > 2 && fails(fd)) { errno = EIO; return -1; }
    return real(fd, iov, n);
}
ssize_t pwritev2(int fd, const struct iovec *iov, int n, off_t offset, int flags) {
    static ssize_t (*real)(int, const struct iovec *, int, off_t, int);
    if (!real) real = dlsym(RTLD_NEXT, "pwritev2");
    if (fails(fd)) { errno = EIO; return -1; }
    return real(fd, iov, n, offset, flags);
}
ssize_t pwritev64v2(int fd, const struct iovec *iov, int n, off_t offset, int flags) { return pwritev2(fd, iov, n, offset, flags); }
