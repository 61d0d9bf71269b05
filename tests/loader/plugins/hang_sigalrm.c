/* lt_hang_sigalrm: blocks SIGALRM and sleeps in its init, so that an alarm() in the loading process
 * cannot stop it (for `tessera doctor --timeout`; never loaded in a test process). Writes its process
 * id to the file named by LT_PID_FILE first, so that a test can check that nothing is left behind. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "tessera/plugin_abi.h"

TESSERA_PLUGIN_EXPORT tessera_status_t tessera_plugin_init(uint32_t host_abi_major, uint32_t host_abi_minor,
                                                           const tessera_host_api_t* host,
                                                           const tessera_plugin_t** out_plugin) {
  (void)host_abi_major;
  (void)host_abi_minor;
  (void)host;
  (void)out_plugin;
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGALRM);
  sigprocmask(SIG_BLOCK, &set, NULL);
  const char* pid_file = getenv("LT_PID_FILE");
  if (pid_file) {
    FILE* f = fopen(pid_file, "a");
    if (f) {
      fprintf(f, "%d\n", (int)getpid());
      fclose(f);
    }
  }
  for (;;) sleep(1000);
}
