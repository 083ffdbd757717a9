/* The pod sandbox's process (containerd's sandbox_image): holds the pod's namespaces,
 * reaps orphans, exits on SIGINT or SIGTERM. Kubernetes' build/pause/linux/pause.c does
 * the same; this one is built here because registry.k8s.io cannot be reached. */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int signal) { _exit(signal == SIGTERM ? 0 : 128 + signal); }

static void reap(int signal) {
  (void)signal;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction action = {0};
  action.sa_handler = stop;
  sigaction(SIGINT, &action, NULL);
  sigaction(SIGTERM, &action, NULL);
  action.sa_handler = reap;
  action.sa_flags = SA_NOCLDSTOP;
  sigaction(SIGCHLD, &action, NULL);
  for (;;) pause();
}
