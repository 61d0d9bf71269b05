/* lt_fork_child: forks a child that sleeps holding every inherited descriptor (the report pipe of
 * `tessera doctor` among them), then hangs in its init (for `tessera doctor --timeout`; never loaded
 * in a test process). Both process ids go to the file named by LT_PID_FILE. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "tessera/plugin_abi.h"

static void append_pid(int pid) {
  const char* pid_file = getenv("LT_PID_FILE");
  if (!pid_file) return;
  FILE* f = fopen(pid_file, "a");
  if (!f) return;
  fprintf(f, "%d\n", pid);
  fclose(f);
}

TESSERA_PLUGIN_EXPORT tessera_status_t tessera_plugin_init(uint32_t host_abi_major, uint32_t host_abi_minor,
                                                           const tessera_host_api_t* host,
                                                           const tessera_plugin_t** out_plugin) {
  (void)host_abi_major;
  (void)host_abi_minor;
  (void)host;
  (void)out_plugin;
  pid_t child = fork();
  if (child == 0) {
    for (;;) sleep(1000);
  }
  append_pid((int)getpid());
  if (child > 0) append_pid((int)child);
  for (;;) sleep(1000);
}
