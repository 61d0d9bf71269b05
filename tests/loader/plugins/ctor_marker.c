/* lt_ctor_marker: not a plugin but a library that a manifest lists in "requires.libraries". Its
 * constructor creates the file named by LT_CTOR_MARKER, so a test sees whether discovery ran it. */
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((constructor)) static void lt_ctor_marker(void) {
  const char* path = getenv("LT_CTOR_MARKER");
  if (!path) return;
  int fd = open(path, O_CREAT | O_WRONLY, 0600);
  if (fd >= 0) close(fd);
}
