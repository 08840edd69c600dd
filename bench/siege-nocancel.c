/*
 * siege-nocancel.c - LD_PRELOAD shim for siege, built by bench/run.
 *
 * siege 4.0.x stops a timed run (-t) by pthread_cancel()ing its worker
 * threads, which it has switched to *asynchronous* cancellation. A thread
 * cancelled in the middle of malloc()/free() dies holding glibc's heap lock,
 * and siege then deadlocks at "Lifting the server siege..." without printing
 * its statistics (upstream: JoeDog/siege issues #4 and #66, fix proposed in
 * pull request #180). Here that happened in ~40% of `-c500` runs.
 *
 * This shim keeps every thread on *deferred* cancellation (the POSIX default),
 * so threads are cancelled only at cancellation points (read, connect, poll,
 * ...), which in a busy benchmark are microseconds away. It changes nothing
 * else about how siege generates load or measures.
 */
#define _GNU_SOURCE
#include <pthread.h>

int pthread_setcanceltype(int type, int *oldtype) {
    (void)type;
    if (oldtype) *oldtype = PTHREAD_CANCEL_DEFERRED;
    return 0;
}
