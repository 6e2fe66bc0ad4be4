/* The pod sandbox's process for the real node's containerd (its sandbox_image): holds the pod's
   namespaces, reaps orphans, exits on SIGTERM/SIGINT. Built static: the image holds nothing else. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) { (void)sig; _exit(0); }
static void reap(int sig) { (void)sig; while (waitpid(-1, 0, WNOHANG) > 0) {} }

int main(void) {
    signal(SIGTERM, stop);
    signal(SIGINT, stop);
    signal(SIGCHLD, reap);
    for (;;) pause();
}
